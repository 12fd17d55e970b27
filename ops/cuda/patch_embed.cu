// Patch embedding on the device: an im2col kernel unfolds each p x p patch into a row
// (channel-major, then patch row, then patch column: the layout of w [D, C, p, p] flattened),
// then one GEMM with the bias epilogue (cuda::linear_forward) gives the tokens.
// The unfolded patches live in a workspace that grows to the largest call and is reused, so a
// steady-state forward pass allocates nothing; a mutex keeps the im2col and its GEMM of one
// call together when several host threads share the default stream.
#include <mutex>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

// x: [B, C, H, W] -> cols: [B * (H/p) * (W/p), C * p * p]
template <typename T>
__global__ void im2col_kernel(T* __restrict__ cols, const T* __restrict__ x, int64_t B, int64_t C,
                              int64_t H, int64_t W, int64_t p) {
  const int64_t Gh = H / p, Gw = W / p, row = C * p * p, total = B * Gh * Gw * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i % row, tok = i / row;
    const int64_t c = e / (p * p), ky = (e / p) % p, kx = e % p;
    const int64_t b = tok / (Gh * Gw), gy = (tok / Gw) % Gh, gx = tok % Gw;
    cols[i] = x[((b * C + c) * H + gy * p + ky) * W + gx * p + kx];
  }
}

struct Workspace {
  std::mutex mu;
  Tensor buf;  // flat device buffer, grows only
};
Workspace& workspace() {
  static Workspace* w = new Workspace();  // never destroyed (see linear.cu)
  return *w;
}

}  // namespace

void patch_embed_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const char* op = "cuda::patch_embed_forward";
  check_device(op, "x", x);
  check_device(op, "w", w);
  check_device(op, "y", y);
  check_ndim(op, "x", x, 4);
  check_ndim(op, "w", w, 4);
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t D = w.size(0), p = w.size(2);
  if (w.size(1) != C || w.size(3) != p || p <= 0) {
    throw ShapeError(std::string(op) + ": w " + w.shape().str() + " is not [D, C, p, p] for x " +
                     x.shape().str());
  }
  if (H % p != 0 || W % p != 0) {
    throw ShapeError(std::string(op) + ": image " + std::to_string(H) + "x" + std::to_string(W) +
                     " is not a multiple of the patch " + std::to_string(p));
  }
  const int64_t G = (H / p) * (W / p);
  check_shape(op, "y", y, Shape{B, G, D});
  check_dtype(op, "w", w, x.dtype());
  check_dtype(op, "y", y, x.dtype());
  require_cuda(op);
  const int64_t rows = B * G, row = C * p * p;
  if (rows == 0 || D == 0) return;

  Workspace& ws = workspace();
  std::lock_guard<std::mutex> lock(ws.mu);
  const int64_t need = rows * row;
  if (!ws.buf.defined() || ws.buf.dtype() != x.dtype() || ws.buf.numel() < need)
    ws.buf = Tensor::empty(Shape{need}, x.dtype(), Device::cuda);
  Tensor cols = ws.buf.slice(0, need).reshape(Shape{rows, row});
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<grid_for(need, 256), 256>>>(static_cast<T*>(cols.raw()),
                                                   static_cast<const T*>(x.raw()), B, C, H, W, p);
  });
  CUDA_CHECK_LAUNCH("im2col_kernel");
  Tensor y2 = y.reshape(Shape{rows, D});
  cuda::linear_forward(y2, cols, w.reshape(Shape{D, row}), b);
}

}  // namespace vitpe::cuda
