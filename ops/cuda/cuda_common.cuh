// Shared by the .cu files of the CUDA backend: host-side argument checks, dtype dispatch,
// launch-size helpers, and f32/bf16 load/store on the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/device_memory.h"
#include "ops/tensor.h"

namespace vitpe::cuda {

// ---- host checks --------------------------------------------------------------------------------
inline void require_cuda(const char* op) {
  if (!cuda_available()) {
    throw std::runtime_error(std::string(op) + ": no CUDA device is available");
  }
}

// t must be defined, on the CUDA device, f32 or bf16.
inline void check_device(const char* op, const char* what, const Tensor& t) {
  if (!t.defined()) throw ShapeError(std::string(op) + ": " + what + " is undefined");
  if (t.device() != Device::cuda) {
    throw std::invalid_argument(std::string(op) + ": expected " + what +
                                " on the cuda device, found it on the " + device_name(t.device()));
  }
}

inline void check_dtype(const char* op, const char* what, const Tensor& t, DType want) {
  if (t.dtype() != want) {
    throw std::invalid_argument(std::string(op) + ": expected " + what + " as " + dtype_name(want) +
                                ", found " + dtype_name(t.dtype()));
  }
}

inline void check_ndim(const char* op, const char* what, const Tensor& t, int ndim) {
  if (t.ndim() != ndim) {
    throw ShapeError(std::string(op) + ": expected " + what + " with " + std::to_string(ndim) +
                     " dimensions, found " + t.shape().str());
  }
}

inline void check_same_numel(const char* op, const char* what, const Tensor& t, int64_t n) {
  if (t.numel() != n) {
    throw ShapeError(std::string(op) + ": expected " + what + " with " + std::to_string(n) +
                     " elements, found " + t.shape().str());
  }
}

// Bytes [p, p + n) and [q, q + m) overlap.
inline bool overlaps(const void* p, size_t n, const void* q, size_t m) {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return n > 0 && m > 0 && a < b + m && b < a + n;
}

// Largest int32 a kernel index may reach; kernels index with int64 where this could be passed.
constexpr int64_t kMaxInt = 2147483647;

// Blocks for n work items at `threads` per block, capped for grid-stride loops.
inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  return static_cast<unsigned>(blocks);
}

// Calls f(float{}) or f(__nv_bfloat16{}) for the tensor's dtype.
template <typename F>
void dispatch_dtype(DType t, F&& f) {
  if (t == DType::f32)
    f(float{});
  else
    f(__nv_bfloat16{});
}

// ---- device load/store --------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// A parameter vector that is f32 or bf16 regardless of the activations' dtype.
struct ParamPtr {
  const void* p = nullptr;
  bool bf16 = false;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                : static_cast<const float*>(p)[i];
  }
};

inline ParamPtr param_ptr(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.raw(), t.dtype() == DType::bf16};
}

}  // namespace vitpe::cuda
