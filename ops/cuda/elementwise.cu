// Elementwise CUDA ops: dtype conversion, exact GELU, add. Grid-stride loops over 64-bit indices.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

template <typename TO, typename TI>
__global__ void convert_kernel(TO* __restrict__ y, const TI* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_float<TO>(to_float(x[i]));
}

// y and x may alias (in place), so no __restrict__.
template <typename T>
__global__ void gelu_kernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = to_float(x[i]);
    y[i] = from_float<T>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

template <typename T>
__global__ void add_kernel(T* y, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

constexpr int kThreads = 256;

}  // namespace

void convert(Tensor& dst, const Tensor& src) {
  const char* op = "cuda::convert";
  check_device(op, "dst", dst);
  check_device(op, "src", src);
  check_same_numel(op, "dst", dst, src.numel());
  require_cuda(op);
  const int64_t n = src.numel();
  if (n == 0) return;
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src);
    return;
  }
  if (dst.dtype() == DType::bf16) {
    convert_kernel<<<grid_for(n, kThreads), kThreads>>>(static_cast<__nv_bfloat16*>(dst.raw()),
                                                        src.f32(), n);
  } else {
    convert_kernel<<<grid_for(n, kThreads), kThreads>>>(
        dst.f32(), static_cast<const __nv_bfloat16*>(src.raw()), n);
  }
  CUDA_CHECK_LAUNCH("convert_kernel");
}

void gelu_forward(Tensor& y, const Tensor& x) {
  const char* op = "cuda::gelu_forward";
  check_device(op, "x", x);
  check_device(op, "y", y);
  check_shape(op, "y", y, x.shape());
  check_dtype(op, "y", y, x.dtype());
  require_cuda(op);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gelu_kernel<T><<<grid_for(n, kThreads), kThreads>>>(static_cast<T*>(y.raw()),
                                                        static_cast<const T*>(x.raw()), n);
  });
  CUDA_CHECK_LAUNCH("gelu_kernel");
}

void add_forward(Tensor& y, const Tensor& a, const Tensor& b) {
  const char* op = "cuda::add_forward";
  check_device(op, "a", a);
  check_device(op, "b", b);
  check_device(op, "y", y);
  check_shape(op, "b", b, a.shape());
  check_shape(op, "y", y, a.shape());
  check_dtype(op, "b", b, a.dtype());
  check_dtype(op, "y", y, a.dtype());
  require_cuda(op);
  const int64_t n = a.numel();
  if (n == 0) return;
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<grid_for(n, kThreads), kThreads>>>(static_cast<T*>(y.raw()),
                                                       static_cast<const T*>(a.raw()),
                                                       static_cast<const T*>(b.raw()), n);
  });
  CUDA_CHECK_LAUNCH("add_kernel");
}

}  // namespace vitpe::cuda
