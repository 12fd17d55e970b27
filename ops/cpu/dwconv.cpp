// Depthwise 3x3 convolution over the token grid, with its residual: CPVT's positional encoding
// generator (PEG), y = x + DWConv3x3(x) on the patch tokens, prefix tokens copied.
//
// x, y: [B, prefix + rows*cols, D] (patch tokens row-major), w: [D, 3, 3] (PyTorch's
// Conv2d(D, D, 3, padding=1, groups=D) weight [D, 1, 3, 3] squeezed), b: [D]. Zero padding
// outside the grid. The channels are contiguous in a token, so every inner loop runs over D
// with the kernel taken as 9 rows of D (w transposed once per call); tokens are split over
// (batch, grid row). The parameter gradients sum over every token in channel blocks, each in
// a fixed order: the same result for any thread count.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

constexpr int64_t kChannelBlock = 64;

// Checks the shapes shared by forward and backward; returns D.
int64_t check_dwconv(const char* op, const char* x_name, const Tensor& x, const Tensor& w,
                     int64_t rows, int64_t cols, int64_t prefix) {
  check_cpu_f32(op, x_name, x);
  check_cpu_f32(op, "w", w);
  if (rows < 1 || cols < 1 || prefix < 0) {
    throw ShapeError(std::string(op) + ": grid " + std::to_string(rows) + "x" +
                     std::to_string(cols) + " with " + std::to_string(prefix) +
                     " prefix tokens: the grid must be at least 1x1 and the prefix >= 0");
  }
  if (x.ndim() != 3 || x.size(1) != prefix + rows * cols) {
    throw ShapeError(std::string(op) + ": expected " + x_name + " of shape [B, " +
                     std::to_string(prefix + rows * cols) + ", D] (" + std::to_string(prefix) +
                     " prefix tokens + a " + std::to_string(rows) + "x" + std::to_string(cols) +
                     " grid), found " + x.shape().str());
  }
  const int64_t D = x.size(2);
  check_shape(op, "w", w, Shape{D, 3, 3});
  return D;
}

// w [D, 3, 3] -> wt [9, D]: tap k = 3 * (dr + 1) + (dc + 1) as a contiguous row of channels.
std::vector<float> taps_by_channel(const Tensor& w, int64_t D) {
  std::vector<float> wt(9 * D);
  const float* pw = w.f32();
  for (int64_t d = 0; d < D; ++d)
    for (int64_t k = 0; k < 9; ++k) wt[k * D + d] = pw[d * 9 + k];
  return wt;
}

}  // namespace

void dwconv3x3_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows,
                       int64_t cols, int64_t prefix) {
  const OpScope scope(OpClass::other);
  const char* op = "dwconv3x3_forward";
  const int64_t D = check_dwconv(op, "x", x, w, rows, cols, prefix);
  check_cpu_f32(op, "b", b);
  check_shape(op, "b", b, Shape{D});
  check_same(op, "y", y, "x", x);
  if (y.f32() == x.f32()) throw ShapeError(std::string(op) + ": y may not alias x");
  const int64_t B = x.size(0), N = x.size(1);
  const std::vector<float> wt = taps_by_channel(w, D);
  const float* pw = wt.data();
  const float* pb = b.f32();
  const float* px = x.f32();
  float* py = y.f32();
#pragma omp parallel for collapse(2) schedule(static) if (B * N * D > 16384)
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t r = -1; r < rows; ++r) {  // r = -1: the prefix tokens
      const float* xb = px + i * N * D;
      float* yb = py + i * N * D;
      if (r < 0) {
        std::copy(xb, xb + prefix * D, yb);
        continue;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t t = prefix + r * cols + c;
        float* yr = yb + t * D;
        const float* xr = xb + t * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) yr[d] = xr[d] + pb[d];
        for (int64_t dr = -1; dr <= 1; ++dr) {
          if (r + dr < 0 || r + dr >= rows) continue;
          for (int64_t dc = -1; dc <= 1; ++dc) {
            if (c + dc < 0 || c + dc >= cols) continue;
            const float* xn = xb + (t + dr * cols + dc) * D;
            const float* wk = pw + (3 * (dr + 1) + (dc + 1)) * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) yr[d] += wk[d] * xn[d];
          }
        }
      }
    }
  }
}

void dwconv3x3_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, int64_t rows, int64_t cols, int64_t prefix) {
  const OpScope scope(OpClass::other);
  const char* op = "dwconv3x3_backward";
  const int64_t D = check_dwconv(op, "x", x, w, rows, cols, prefix);
  check_same(op, "dy", dy, "x", x);
  const int64_t B = x.size(0), N = x.size(1);
  const float* pdy = dy.f32();
  const float* px = x.f32();

  // dx += dy (the residual) + the transposed convolution of dy: the token at (r, c) fed output
  // (r - dr, c - dc) through tap (dr, dc).
  if (dx.defined()) {
    check_same(op, "dx", dx, "x", x);
    if (dx.f32() == dy.f32()) throw ShapeError(std::string(op) + ": dx may not alias dy");
    const std::vector<float> wt = taps_by_channel(w, D);
    const float* pw = wt.data();
    float* pdx = dx.f32();
#pragma omp parallel for collapse(2) schedule(static) if (B * N * D > 16384)
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t r = -1; r < rows; ++r) {
        const float* gb = pdy + i * N * D;
        float* dxb = pdx + i * N * D;
        if (r < 0) {
          for (int64_t j = 0; j < prefix * D; ++j) dxb[j] += gb[j];
          continue;
        }
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t t = prefix + r * cols + c;
          float* gr = dxb + t * D;
          const float* dyr = gb + t * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) gr[d] += dyr[d];
          for (int64_t dr = -1; dr <= 1; ++dr) {
            if (r - dr < 0 || r - dr >= rows) continue;
            for (int64_t dc = -1; dc <= 1; ++dc) {
              if (c - dc < 0 || c - dc >= cols) continue;
              const float* go = gb + (t - dr * cols - dc) * D;
              const float* wk = pw + (3 * (dr + 1) + (dc + 1)) * D;
#pragma omp simd
              for (int64_t d = 0; d < D; ++d) gr[d] += wk[d] * go[d];
            }
          }
        }
      }
    }
  }

  // dw[d, tap] += sum over outputs of dy * the input at the tap; db[d] += sum of dy.
  const bool want_dw = dw.defined(), want_db = db.defined();
  if (!want_dw && !want_db) return;
  if (want_dw) check_same(op, "dw", dw, "w", w);
  if (want_db) {
    check_cpu_f32(op, "db", db);
    check_shape(op, "db", db, Shape{D});
  }
  const int64_t blocks = (D + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && B * N * D > 16384)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t d0 = blk * kChannelBlock, n = std::min(D, d0 + kChannelBlock) - d0;
    float acc_w[9][kChannelBlock] = {};
    float acc_b[kChannelBlock] = {};
    for (int64_t i = 0; i < B; ++i) {
      const float* xb = px + i * N * D + d0;
      const float* gb = pdy + i * N * D + d0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t t = prefix + r * cols + c;
          const float* dyr = gb + t * D;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) acc_b[j] += dyr[j];
          for (int64_t dr = -1; dr <= 1; ++dr) {
            if (r + dr < 0 || r + dr >= rows) continue;
            for (int64_t dc = -1; dc <= 1; ++dc) {
              if (c + dc < 0 || c + dc >= cols) continue;
              const float* xn = xb + (t + dr * cols + dc) * D;
              float* aw = acc_w[3 * (dr + 1) + (dc + 1)];
#pragma omp simd
              for (int64_t j = 0; j < n; ++j) aw[j] += dyr[j] * xn[j];
            }
          }
        }
      }
    }
    if (want_dw) {
      float* pdw = dw.f32();
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < 9; ++k) pdw[(d0 + j) * 9 + k] += acc_w[k][j];
    }
    if (want_db) {
      float* pdb = db.f32();
      for (int64_t j = 0; j < n; ++j) pdb[d0 + j] += acc_b[j];
    }
  }
}

}  // namespace vitpe
