// Swin patch merging's gather on the device: each 2x2 neighbourhood of the token grid becomes
// one token of 4x the channels, concatenated as (row0,col0), (row1,col0), (row0,col1),
// (row1,col1) (timm's x0..x3 in PatchMerging). LayerNorm and the reduction run after it.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

// x: [B, R*C, D] -> y: [B, (R/2)*(C/2), 4D]
template <typename T>
__global__ void patch_merge_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t B, int64_t R,
                                   int64_t C, int64_t D) {
  const int64_t R2 = R / 2, C2 = C / 2, total = B * R2 * C2 * 4 * D;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % D, part = (i / D) % 4, p = (i / (4 * D)) % (R2 * C2),
                  b = i / (4 * D * R2 * C2);
    const int64_t r = 2 * (p / C2) + (part & 1), c = 2 * (p % C2) + (part >> 1);
    y[i] = x[((b * R + r) * C + c) * D + d];
  }
}

}  // namespace

void patch_merge_forward(Tensor& y, const Tensor& x, int64_t rows, int64_t cols) {
  const char* op = "cuda::patch_merge_forward";
  check_device(op, "x", x);
  check_device(op, "y", y);
  check_ndim(op, "x", x, 3);
  if (rows <= 0 || cols <= 0 || rows % 2 != 0 || cols % 2 != 0 || x.size(1) != rows * cols) {
    throw ShapeError(std::string(op) + ": x " + x.shape().str() + " is not an even " +
                     std::to_string(rows) + "x" + std::to_string(cols) + " token grid");
  }
  const int64_t B = x.size(0), D = x.size(2);
  check_shape(op, "y", y, Shape{B, (rows / 2) * (cols / 2), 4 * D});
  check_dtype(op, "y", y, x.dtype());
  if (overlaps(x.raw(), x.nbytes(), y.raw(), y.nbytes()))
    throw std::invalid_argument(std::string(op) + ": x and y must not overlap");
  require_cuda(op);
  const int64_t total = y.numel();
  if (total == 0) return;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    patch_merge_kernel<T><<<grid_for(total, 256), 256>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), B, rows, cols, D);
  });
  CUDA_CHECK_LAUNCH("patch_merge_kernel");
}

}  // namespace vitpe::cuda
