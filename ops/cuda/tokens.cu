// Token sequences on the device: assembling ViT's input (prefix tokens before the patch tokens,
// plus an absolute position table) and selecting tokens (class-token pooling). One thread per
// element; a warp reads and writes consecutive channels.
#include <algorithm>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

// y[b, n, :] = (n < P ? prefix[n, :] : x[b, n - P, :]) + table[n - table_skip, :] where
// n >= table_skip (no table: nothing added).
template <typename T>
__global__ void assemble_tokens_kernel(T* __restrict__ y, const float* __restrict__ prefix,
                                       const T* x, const float* __restrict__ table, int64_t B,
                                       int64_t P, int64_t Np, int64_t D, int64_t table_skip) {
  const int64_t N = P + Np;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < B * N * D;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % D, n = (i / D) % N, b = i / (N * D);
    float v = n < P ? prefix[n * D + d] : to_float(x[(b * Np + n - P) * D + d]);
    if (table && n >= table_skip) v += table[(n - table_skip) * D + d];
    y[i] = from_float<T>(v);
  }
}

// y[b, t, :] = x[b, start + t, :]
template <typename T>
__global__ void select_tokens_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t B,
                                     int64_t N, int64_t count, int64_t D, int64_t start) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < B * count * D;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % D, t = (i / D) % count, b = i / (count * D);
    y[i] = x[(b * N + start + t) * D + d];
  }
}

void check_f32_param(const char* op, const char* what, const Tensor& t, const Shape& shape) {
  check_device(op, what, t);
  check_dtype(op, what, t, DType::f32);
  check_shape(op, what, t, shape);
}

}  // namespace

void assemble_tokens_forward(Tensor& y, const Tensor& prefix, const Tensor& x,
                             const Tensor& table) {
  const char* op = "cuda::assemble_tokens_forward";
  check_device(op, "x", x);
  check_device(op, "y", y);
  check_ndim(op, "x", x, 3);
  const int64_t B = x.size(0), Np = x.size(1), D = x.size(2);
  const int64_t P = prefix.defined() ? prefix.numel() / std::max<int64_t>(D, 1) : 0;
  if (prefix.defined()) check_f32_param(op, "prefix", prefix, Shape{P, D});
  const int64_t N = P + Np;
  check_shape(op, "y", y, Shape{B, N, D});
  check_dtype(op, "y", y, x.dtype());
  int64_t table_skip = 0;
  if (table.defined()) {
    check_device(op, "table", table);
    check_dtype(op, "table", table, DType::f32);
    check_ndim(op, "table", table, 2);
    if (table.size(0) == Np && P > 0) table_skip = P;  // the patch rows only
    check_shape(op, "table", table, Shape{N - table_skip, D});
  }
  // In place is fine without prefix tokens (each element reads its own position first).
  if (P > 0 && overlaps(y.raw(), y.nbytes(), x.raw(), x.nbytes()))
    throw std::invalid_argument(std::string(op) +
                                ": y must not overlap x when prefix tokens come first");
  if (P == 0 && y.raw() != x.raw() && overlaps(y.raw(), y.nbytes(), x.raw(), x.nbytes()))
    throw std::invalid_argument(std::string(op) + ": y partially overlaps x");
  require_cuda(op);
  if (B * N * D == 0) return;
  const float* pre = prefix.defined() ? prefix.f32() : nullptr;
  const float* tab = table.defined() ? table.f32() : nullptr;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    assemble_tokens_kernel<T><<<grid_for(B * N * D, 256), 256>>>(static_cast<T*>(y.raw()), pre,
                                                                 static_cast<const T*>(x.raw()),
                                                                 tab, B, P, Np, D, table_skip);
  });
  CUDA_CHECK_LAUNCH("assemble_tokens_kernel");
}

void select_tokens_forward(Tensor& y, const Tensor& x, int64_t start) {
  const char* op = "cuda::select_tokens_forward";
  check_device(op, "x", x);
  check_device(op, "y", y);
  check_ndim(op, "x", x, 3);
  check_ndim(op, "y", y, 3);
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), count = y.size(1);
  check_shape(op, "y", y, Shape{B, count, D});
  check_dtype(op, "y", y, x.dtype());
  if (start < 0 || start + count > N) {
    throw ShapeError(std::string(op) + ": tokens [" + std::to_string(start) + ", " +
                     std::to_string(start + count) + ") are not inside x " + x.shape().str());
  }
  if (overlaps(y.raw(), y.nbytes(), x.raw(), x.nbytes()))
    throw std::invalid_argument(std::string(op) + ": y must not overlap x");
  require_cuda(op);
  if (B * count * D == 0) return;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    select_tokens_kernel<T><<<grid_for(B * count * D, 256), 256>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), B, N, count, D, start);
  });
  CUDA_CHECK_LAUNCH("select_tokens_kernel");
}

}  // namespace vitpe::cuda
