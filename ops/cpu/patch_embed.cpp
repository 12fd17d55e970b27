// Patch embedding (a convolution with kernel = stride = patch) as im2col + one linear layer:
// the patches never overlap, so unfolding them is a permutation of the image and the
// convolution is a single [B*T, C*p*p] x [C*p*p, D] matmul on oneDNN (ops/cpu/linear_impl.h).
// The unfolded rows live in a per-thread scratch buffer, so steady state allocates nothing.
#include <cstring>
#include <stdexcept>
#include <string>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/linear_impl.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

struct Geometry {
  int64_t batch, channels, height, width, dim, patch, grid_h, grid_w;
  int64_t rows() const { return batch * grid_h * grid_w; }  // tokens of all images
  int64_t cols() const { return channels * patch * patch; }
};

Geometry check_patch_embed(const char* op, const Tensor& x, const Tensor& w) {
  check_cpu_f32(op, "x", x);
  if (!w.defined()) throw ShapeError(std::string(op) + ": w is undefined");
  if (x.ndim() != 4) {
    throw ShapeError(std::string(op) + ": expected x of shape [B, C, H, W], found " +
                     x.shape().str());
  }
  if (w.ndim() != 4 || w.size(2) != w.size(3) || w.size(1) != x.size(1) || w.size(2) <= 0) {
    throw ShapeError(std::string(op) + ": expected w of shape [D, " + std::to_string(x.size(1)) +
                     ", p, p] for x " + x.shape().str() + ", found " + w.shape().str());
  }
  Geometry g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), 0, 0};
  if (g.height % g.patch != 0 || g.width % g.patch != 0) {
    throw ShapeError(std::string(op) + ": image height " + std::to_string(g.height) +
                     " and width " + std::to_string(g.width) +
                     " must both be multiples of the patch size " + std::to_string(g.patch) +
                     " (x " + x.shape().str() + ")");
  }
  g.grid_h = g.height / g.patch;
  g.grid_w = g.width / g.patch;
  return g;
}

// x: [B, C, H, W] -> cols: [B*Gh*Gw, C*p*p], column order (c, i, j) as w: [D, C, p, p].
void im2col(float* cols, const float* x, const Geometry& g) {
  const int64_t p = g.patch, k = g.cols();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t gy = 0; gy < g.grid_h; ++gy) {
      for (int64_t gx = 0; gx < g.grid_w; ++gx) {
        float* row = cols + ((b * g.grid_h + gy) * g.grid_w + gx) * k;
        for (int64_t c = 0; c < g.channels; ++c) {
          for (int64_t i = 0; i < p; ++i) {
            const float* src =
                x + ((b * g.channels + c) * g.height + gy * p + i) * g.width + gx * p;
            std::memcpy(row + (c * p + i) * p, src, static_cast<size_t>(p) * sizeof(float));
          }
        }
      }
    }
  }
}

// dx: [B, C, H, W] += fold(dcols) for dcols: [B*Gh*Gw, C*p*p] (the inverse permutation).
void col2im_add(float* dx, const float* dcols, const Geometry& g) {
  const int64_t p = g.patch, k = g.cols();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t gy = 0; gy < g.grid_h; ++gy) {
      for (int64_t gx = 0; gx < g.grid_w; ++gx) {
        const float* row = dcols + ((b * g.grid_h + gy) * g.grid_w + gx) * k;
        for (int64_t c = 0; c < g.channels; ++c) {
          for (int64_t i = 0; i < p; ++i) {
            float* dst = dx + ((b * g.channels + c) * g.height + gy * p + i) * g.width + gx * p;
            const float* src = row + (c * p + i) * p;
            for (int64_t j = 0; j < p; ++j) dst[j] += src[j];
          }
        }
      }
    }
  }
}

}  // namespace

void patch_embed_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const OpScope scope(OpClass::patch_embed);
  const char* op = "patch_embed_forward";
  const Geometry g = check_patch_embed(op, x, w);
  check_shape(op, "y", y, Shape{g.batch, g.grid_h * g.grid_w, g.dim});
  check_cpu_f32(op, "y", y);
  if (b.defined()) {
    check_shape(op, "b", b, Shape{g.dim});
    check_cpu_f32(op, "b", b);
  }
  const int64_t m = g.rows(), k = g.cols();
  float* cols = cpu::scratch_f32(cpu::ScratchSlot::patch_embed_cols, static_cast<size_t>(m * k));
  im2col(cols, x.f32(), g);
  // y: [B*T, D] = cols [B*T, C*p*p] w^T + b
  cpu::linear_rows_forward(y.f32(), cols, w.raw(), w.dtype(), b.defined() ? b.f32() : nullptr, m, k,
                           g.dim, Act::none, nullptr);
}

void patch_embed_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                          const Tensor& w) {
  const OpScope scope(OpClass::patch_embed);
  const char* op = "patch_embed_backward";
  const Geometry g = check_patch_embed(op, x, w);
  check_shape(op, "dy", dy, Shape{g.batch, g.grid_h * g.grid_w, g.dim});
  check_cpu_f32(op, "dy", dy);
  if (dx.defined()) {
    check_shape(op, "dx", dx, x.shape());
    check_cpu_f32(op, "dx", dx);
  }
  if (dw.defined()) {
    check_shape(op, "dw", dw, w.shape());
    check_cpu_f32(op, "dw", dw);
  }
  if (db.defined()) {
    check_shape(op, "db", db, Shape{g.dim});
    check_cpu_f32(op, "db", db);
  }
  const int64_t m = g.rows(), k = g.cols();
  if (dx.defined()) {
    // dcols: [B*T, C*p*p] = dy w, then folded back onto the image.
    float* dcols =
        cpu::scratch_f32(cpu::ScratchSlot::patch_embed_dcols, static_cast<size_t>(m * k));
    cpu::linear_rows_backward(dcols, nullptr, nullptr, dy.f32(), nullptr, w.raw(), w.dtype(), m, k,
                              g.dim, /*accumulate=*/false);
    col2im_add(dx.f32(), dcols, g);
  }
  if (dw.defined() || db.defined()) {
    float* cols = nullptr;
    if (dw.defined()) {
      cols = cpu::scratch_f32(cpu::ScratchSlot::patch_embed_cols, static_cast<size_t>(m * k));
      im2col(cols, x.f32(), g);
    }
    // dw: [D, C*p*p] += dy^T cols, db: [D] += column sums of dy
    cpu::linear_rows_backward(nullptr, dw.defined() ? dw.f32() : nullptr,
                              db.defined() ? db.f32() : nullptr, dy.f32(), cols, w.raw(), w.dtype(),
                              m, k, g.dim);
  }
}

}  // namespace vitpe
