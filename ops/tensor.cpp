#include "ops/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "ops/device_memory.h"

namespace vitpe {

const char* dtype_name(DType t) { return t == DType::f32 ? "f32" : "bf16"; }
const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }
size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

// ---------------------------------------------------------------------------------------------
// Shape

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > kMaxDims) throw ShapeError("Shape: at most 6 dimensions are supported");
  for (int64_t d : dims) d_[n_++] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  if (dims.size() > kMaxDims) throw ShapeError("Shape: at most 6 dimensions are supported");
  for (int64_t d : dims) d_[n_++] = d;
}

int64_t Shape::dim(int i) const {
  int j = i < 0 ? i + n_ : i;
  if (j < 0 || j >= n_) {
    throw ShapeError("Shape::dim: index " + std::to_string(i) + " out of range for " + str());
  }
  return d_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) {
    if (__builtin_mul_overflow(n, d_[i], &n)) {
      throw ShapeError("Shape " + str() + ": the number of elements does not fit in 64 bits");
    }
  }
  return n;
}

Shape Shape::with_last(int64_t n) const {
  Shape r = *this;
  if (r.n_ > 0) r.d_[r.n_ - 1] = n;
  return r;
}

std::string Shape::str() const {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < n_; ++i) s << (i ? ", " : "") << d_[i];
  s << ']';
  return s.str();
}

bool Shape::operator==(const Shape& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i)
    if (d_[i] != o.d_[i]) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Storage

namespace {
std::atomic<int64_t> g_allocations{0};
}

int64_t storage_allocation_count() { return g_allocations.load(); }

struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::cpu;

  Storage(size_t n, Device d) : bytes(n), device(d) {
    size_t padded = (n + 63) / 64 * 64;
    if (padded == 0) padded = 64;
    if (d == Device::cpu) {
      ptr = std::aligned_alloc(64, padded);
      if (!ptr) throw std::bad_alloc();
    } else {
      ptr = cuda_alloc(padded);
    }
    ++g_allocations;
  }
  ~Storage() {
    if (!owned) return;
    if (device == Device::cpu)
      std::free(ptr);
    else
      cuda_free(ptr);
  }
  // The caller's CPU memory, not owned (Tensor::wrap): nothing is allocated or freed.
  Storage(void* external, size_t n) : ptr(external), bytes(n), owned(false) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  bool owned = true;
};

// ---------------------------------------------------------------------------------------------
// Tensor

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw ShapeError("Tensor::empty: negative dimension in " + shape.str());
  }
  Tensor t;
  t.storage_ =
      std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::wrap(const float* data, const Shape& shape) {
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw ShapeError("Tensor::wrap: negative dimension in " + shape.str());
  }
  if (data == nullptr && shape.numel() > 0) {
    throw std::invalid_argument("Tensor::wrap: null data for shape " + shape.str());
  }
  Tensor t;
  // const_cast: the tensor is documented as read-only (ops read their inputs).
  t.storage_ = std::make_shared<Storage>(const_cast<float*>(data),
                                         static_cast<size_t>(shape.numel()) * sizeof(float));
  t.shape_ = shape;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from(const Shape& shape, const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    throw ShapeError("Tensor::from: shape " + shape.str() + " needs " +
                     std::to_string(shape.numel()) + " values, found " +
                     std::to_string(values.size()));
  }
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

namespace {
void require_dtype(const Tensor& t, DType want) {
  if (!t.defined()) throw std::logic_error("Tensor: access to an undefined tensor");
  if (t.dtype() != want) {
    throw std::invalid_argument(std::string("Tensor: expected dtype ") + dtype_name(want) +
                                ", found " + dtype_name(t.dtype()));
  }
}
}  // namespace

void* Tensor::raw() {
  if (!storage_) throw std::logic_error("Tensor: access to an undefined tensor");
  return static_cast<char*>(storage_->ptr) + offset_;
}
const void* Tensor::raw() const { return const_cast<Tensor*>(this)->raw(); }

float* Tensor::f32() {
  require_dtype(*this, DType::f32);
  return static_cast<float*>(raw());
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }

float& Tensor::at(int64_t i) {
  if (i < 0 || i >= numel()) {
    throw std::out_of_range("Tensor::at: index " + std::to_string(i) + " outside a tensor " +
                            shape().str() + " of " + std::to_string(numel()) + " elements");
  }
  return f32()[i];
}
float Tensor::at(int64_t i) const { return const_cast<Tensor*>(this)->at(i); }
uint16_t* Tensor::bf16() {
  require_dtype(*this, DType::bf16);
  return static_cast<uint16_t*>(raw());
}
const uint16_t* Tensor::bf16() const { return const_cast<Tensor*>(this)->bf16(); }

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  if (ndim() == 0) throw ShapeError("Tensor::slice: tensor has no dimensions");
  if (begin < 0 || end < begin || end > shape_[0]) {
    throw ShapeError("Tensor::slice: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") out of range for " + shape_.str());
  }
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError("Tensor::reshape: more than one -1 in " + shape.str());
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0 && known > 0 && numel() % known == 0) s[infer] = numel() / known;
  if (s.numel() != numel()) {
    throw ShapeError("Tensor::reshape: cannot view " + shape_.str() + " as " + shape.str());
  }
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (device_ != Device::cpu) throw std::invalid_argument("Tensor::to(dtype): CPU tensors only");
  if (dtype == dtype_) return clone();
  Tensor t = empty(shape_, dtype, device_);
  int64_t n = numel();
  if (dtype == DType::bf16) {
    const float* s = f32();
    uint16_t* d = t.bf16();
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
  } else {
    const uint16_t* s = bf16();
    float* d = t.f32();
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
  }
  return t;
}

void Tensor::fill(float value) {
  if (device_ != Device::cpu) throw std::invalid_argument("Tensor::fill: CPU tensors only");
  float* p = f32();
  int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void Tensor::zero() {
  if (!defined()) return;
  if (device_ != Device::cpu) {
    cuda_zero(raw(), nbytes());
    return;
  }
  // Large buffers (backward's gradient buffers) are cleared by every thread: one core does not
  // saturate the memory bus.
  constexpr size_t kChunk = size_t{1} << 20;
  const size_t bytes = nbytes();
  auto* p = static_cast<char*>(raw());
  const auto chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    std::memset(p + begin, 0, std::min(kChunk, bytes - begin));
  }
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel() != numel() || src.dtype() != dtype_) {
    throw ShapeError(std::string("Tensor::copy_from: expected ") + dtype_name(dtype_) + " " +
                     shape_.str() + ", found " + dtype_name(src.dtype()) + " " + src.shape().str());
  }
  if (nbytes() == 0) return;
  if (device_ == Device::cpu && src.device() == Device::cpu) {
    std::memcpy(raw(), src.raw(), nbytes());
  } else if (device_ == Device::cuda && src.device() == Device::cpu) {
    cuda_copy(raw(), src.raw(), nbytes(), CopyKind::host_to_device);
  } else if (device_ == Device::cpu && src.device() == Device::cuda) {
    cuda_copy(raw(), src.raw(), nbytes(), CopyKind::device_to_host);
  } else {
    cuda_copy(raw(), src.raw(), nbytes(), CopyKind::device_to_device);
  }
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected) {
  if (!t.defined()) {
    throw ShapeError(std::string(op) + ": expected " + what + " of shape " + expected.str() +
                     ", found an undefined tensor");
  }
  if (t.shape() != expected) {
    throw ShapeError(std::string(op) + ": expected " + what + " of shape " + expected.str() +
                     ", found " + t.shape().str());
  }
}

void check_cpu_f32(const char* op, const char* what, const Tensor& t) {
  if (!t.defined()) throw ShapeError(std::string(op) + ": " + what + " is undefined");
  if (t.device() != Device::cpu || t.dtype() != DType::f32) {
    throw std::invalid_argument(std::string(op) + ": expected " + what + " as cpu f32, found " +
                                device_name(t.device()) + " " + dtype_name(t.dtype()));
  }
}

void check_same(const char* op, const char* what, const Tensor& t, const char* ref_what,
                const Tensor& ref) {
  check_cpu_f32(op, what, t);
  if (t.shape() != ref.shape()) {
    throw ShapeError(std::string(op) + ": expected " + what + " of shape " + ref.shape().str() +
                     " (the shape of " + ref_what + "), found " + t.shape().str());
  }
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace vitpe
