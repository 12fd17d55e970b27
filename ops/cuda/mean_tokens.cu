// Mean over tokens on the device (Swin's and global-average-pool ViT's pooling): one thread per
// (image, channel), summing down the token axis so that a warp reads consecutive channels.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

// x: [B, N, D] -> y: [B, D] = mean of x[:, start:, :]
template <typename T>
__global__ void mean_tokens_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t B, int64_t N,
                                   int64_t D, int64_t start) {
  const float inv = 1.0f / static_cast<float>(N - start);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < B * D;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / D, d = i % D;
    const T* xb = x + b * N * D + d;
    float s = 0.f;
    for (int64_t n = start; n < N; ++n) s += to_float(xb[n * D]);
    y[i] = from_float<T>(s * inv);
  }
}

}  // namespace

void mean_tokens_forward(Tensor& y, const Tensor& x, int64_t start) {
  const char* op = "cuda::mean_tokens_forward";
  check_device(op, "x", x);
  check_device(op, "y", y);
  check_ndim(op, "x", x, 3);
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2);
  check_shape(op, "y", y, Shape{B, D});
  check_dtype(op, "y", y, x.dtype());
  if (start < 0 || start >= N) {
    throw ShapeError(std::string(op) + ": start " + std::to_string(start) +
                     " leaves no tokens in x " + x.shape().str());
  }
  require_cuda(op);
  if (B * D == 0) return;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    mean_tokens_kernel<T><<<grid_for(B * D, 256), 256>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), B, N, D, start);
  });
  CUDA_CHECK_LAUNCH("mean_tokens_kernel");
}

}  // namespace vitpe::cuda
