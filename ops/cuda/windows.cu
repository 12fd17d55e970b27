// Swin's window partition and merge on the device, with the cyclic shift folded into the
// index map (no separate roll pass). One thread per element of the window tensor; partition
// gathers, merge scatters through the same bijection, so neither needs atomics.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

struct WindowMap {
  int64_t R, C, Mh, Mw, sr, sc, nWx, nW, D;
  // Element i of windows [B*nW, Mh*Mw, D] -> element of x [B, R*C, D].
  __device__ __forceinline__ int64_t source(int64_t i) const {
    const int64_t d = i % D, t = (i / D) % (Mh * Mw), wg = i / (D * Mh * Mw);
    const int64_t b = wg / nW, w = wg % nW;
    const int64_t r = (w / nWx) * Mh + t / Mw, c = (w % nWx) * Mw + t % Mw;  // rolled frame
    const int64_t r0 = (r + sr) % R, c0 = (c + sc) % C;                      // original frame
    return ((b * R + r0) * C + c0) * D + d;
  }
};

template <typename T>
__global__ void window_partition_kernel(T* __restrict__ windows, const T* __restrict__ x,
                                        WindowMap m, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x)
    windows[i] = x[m.source(i)];
}

template <typename T>
__global__ void window_merge_kernel(T* __restrict__ x, const T* __restrict__ windows, WindowMap m,
                                    int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x)
    x[m.source(i)] = windows[i];
}

// Checks the shapes of x [B, R*C, D] and windows [B*nW, Mh*Mw, D]; returns the map.
WindowMap window_map(const char* op, const Tensor& x, const Tensor& windows, int64_t R, int64_t C,
                     int64_t Mh, int64_t Mw, int64_t sr, int64_t sc) {
  check_device(op, "x", x);
  check_device(op, "windows", windows);
  check_ndim(op, "x", x, 3);
  check_dtype(op, "windows", windows, x.dtype());
  if (R <= 0 || C <= 0 || Mh <= 0 || Mw <= 0 || R % Mh != 0 || C % Mw != 0) {
    throw ShapeError(std::string(op) + ": grid " + std::to_string(R) + "x" + std::to_string(C) +
                     " is not divisible into windows of " + std::to_string(Mh) + "x" +
                     std::to_string(Mw));
  }
  if (x.size(1) != R * C) {
    throw ShapeError(std::string(op) + ": x " + x.shape().str() + " does not hold a " +
                     std::to_string(R) + "x" + std::to_string(C) + " token grid");
  }
  if (sr < 0 || sr >= R || sc < 0 || sc >= C) {
    throw std::invalid_argument(std::string(op) + ": shift (" + std::to_string(sr) + ", " +
                                std::to_string(sc) + ") must lie in [0, grid)");
  }
  const int64_t B = x.size(0), D = x.size(2), nWx = C / Mw, nW = (R / Mh) * nWx;
  check_shape(op, "windows", windows, Shape{B * nW, Mh * Mw, D});
  if (overlaps(x.raw(), x.nbytes(), windows.raw(), windows.nbytes()))
    throw std::invalid_argument(std::string(op) + ": x and windows must not overlap");
  return {R, C, Mh, Mw, sr, sc, nWx, nW, D};
}

}  // namespace

void window_partition_forward(Tensor& windows, const Tensor& x, int64_t rows, int64_t cols,
                              int64_t win_rows, int64_t win_cols, int64_t shift_r,
                              int64_t shift_c) {
  const char* op = "cuda::window_partition_forward";
  WindowMap m = window_map(op, x, windows, rows, cols, win_rows, win_cols, shift_r, shift_c);
  require_cuda(op);
  const int64_t total = windows.numel();
  if (total == 0) return;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    window_partition_kernel<T><<<grid_for(total, 256), 256>>>(
        static_cast<T*>(windows.raw()), static_cast<const T*>(x.raw()), m, total);
  });
  CUDA_CHECK_LAUNCH("window_partition_kernel");
}

void window_merge_forward(Tensor& x, const Tensor& windows, int64_t rows, int64_t cols,
                          int64_t win_rows, int64_t win_cols, int64_t shift_r, int64_t shift_c) {
  const char* op = "cuda::window_merge_forward";
  WindowMap m = window_map(op, x, windows, rows, cols, win_rows, win_cols, shift_r, shift_c);
  require_cuda(op);
  const int64_t total = windows.numel();
  if (total == 0) return;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    window_merge_kernel<T><<<grid_for(total, 256), 256>>>(
        static_cast<T*>(x.raw()), static_cast<const T*>(windows.raw()), m, total);
  });
  CUDA_CHECK_LAUNCH("window_merge_kernel");
}

}  // namespace vitpe::cuda
