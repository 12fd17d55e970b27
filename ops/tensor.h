// Tensor: contiguous, row-major, f32 or bf16 storage, on the CPU or a CUDA device.
//
// A Tensor is a cheap handle: copying it shares the storage (reference counted). Views
// (`slice` of the leading dimension, `reshape`) share the storage too. Storage is 64-byte
// aligned so oneDNN and vector loops can use aligned loads. Shapes live inline (no heap), so
// creating views in a hot loop allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace vitpe {

enum class DType : uint8_t { f32, bf16 };
enum class Device : uint8_t { cpu, cuda };

const char* dtype_name(DType t);
const char* device_name(Device d);
size_t dtype_size(DType t);

// Thrown by every shape check: the message names the operation and both shapes.
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

constexpr int kMaxDims = 6;

// A shape with inline storage (no heap allocation). Dimensions are int64_t.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int size() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  // Negative indices count from the end (-1 is the last dimension).
  int64_t dim(int i) const;
  int64_t numel() const;
  std::vector<int64_t> vec() const { return {d_, d_ + n_}; }
  std::string str() const;  // "[2, 197, 384]"
  // This shape with the last dimension replaced by n.
  Shape with_last(int64_t n) const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

struct Storage;

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised storage.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor full(const Shape& shape, float value);
  // f32 CPU tensor holding a copy of `values` (values.size() must equal shape.numel()).
  static Tensor from(const Shape& shape, const std::vector<float>& values);
  // f32 CPU view of the caller's memory (no copy, no allocation of storage): for inputs only;
  // the memory must outlive the tensor and its copies, and nothing may write through it.
  static Tensor wrap(const float* data, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.size(); }
  int64_t size(int i) const { return shape_.dim(i); }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Typed pointers; throw if the dtype differs. Valid on CPU; on CUDA they are device pointers.
  float* f32();
  const float* f32() const;
  uint16_t* bf16();
  const uint16_t* bf16() const;
  void* raw();
  const void* raw() const;

  // View of rows [begin, end) of the leading dimension; shares storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // View with a new shape of the same number of elements; one dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  // Deep copy (same device and dtype).
  Tensor clone() const;
  // Copy to another device (a deep copy even when the device is the same).
  Tensor to(Device device) const;
  // f32 <-> bf16 conversion (round to nearest even); CPU only.
  Tensor to(DType dtype) const;

  void fill(float value);  // CPU f32 only
  void zero();             // any device and dtype
  // Copies the elements of `src` (same numel and dtype, any device pair).
  void copy_from(const Tensor& src);

  // True when the two tensors share storage.
  bool shares_storage(const Tensor& o) const { return storage_ == o.storage_; }

  // Element access for tests and references (CPU f32); like std::vector::at, an index outside
  // [0, numel) throws std::out_of_range naming both.
  float& at(int64_t i);
  float at(int64_t i) const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // in bytes
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

// Number of storage allocations made so far (all devices). Tests use it to prove that a
// steady-state forward pass allocates nothing.
int64_t storage_allocation_count();

// Throws ShapeError("op: expected <what> of shape E, found F") unless t has the shape.
void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected);
// Throws unless t is defined, on the CPU and f32.
void check_cpu_f32(const char* op, const char* what, const Tensor& t);
// check_cpu_f32, then ShapeError("op: expected <what> of shape S (the shape of <ref_what>),
// found F") unless t has ref's shape.
void check_same(const char* op, const char* what, const Tensor& t, const char* ref_what,
                const Tensor& ref);

// bf16 helpers (round to nearest even).
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);

}  // namespace vitpe
