// Mean over tokens on the CPU (ViT 'avg' pooling and Swin's final pooling).
//
// x: [B, N, D] -> y: [B, D] = mean of x[:, start:, :]; start skips prefix tokens (class,
// registers), which get no gradient. Work is split over (batch, column block) so that the
// inner loop runs over contiguous columns.
#include <algorithm>
#include <string>

#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

constexpr int64_t kColumnBlock = 128;

void check_start(const char* op, int64_t n, int64_t start) {
  if (start < 0 || start >= n) {
    throw ShapeError(std::string(op) + ": start " + std::to_string(start) +
                     " must leave at least one token of " + std::to_string(n));
  }
}

}  // namespace

void mean_tokens_forward(Tensor& y, const Tensor& x, int64_t start) {
  const OpScope scope(OpClass::other);
  const char* op = "mean_tokens_forward";
  check_cpu_f32(op, "x", x);
  check_cpu_f32(op, "y", y);
  if (x.ndim() != 3) {
    throw ShapeError(std::string(op) + ": expected x of shape [B, N, D], found " + x.shape().str());
  }
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  check_shape(op, "y", y, Shape{b, d});
  check_start(op, n, start);
  const float* px = x.f32();
  float* py = y.f32();
  const float inv = 1.0f / static_cast<float>(n - start);
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for collapse(2) schedule(static) if (b * n * d > 65536)
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kColumnBlock, w = std::min(d, c0 + kColumnBlock) - c0;
      float acc[kColumnBlock] = {};
      for (int64_t t = start; t < n; ++t) {
        const float* xr = px + (i * n + t) * d + c0;
        for (int64_t j = 0; j < w; ++j) acc[j] += xr[j];
      }
      for (int64_t j = 0; j < w; ++j) py[i * d + c0 + j] = acc[j] * inv;
    }
  }
}

void mean_tokens_backward(Tensor& dx, const Tensor& dy, int64_t start) {
  const OpScope scope(OpClass::other);
  const char* op = "mean_tokens_backward";
  check_cpu_f32(op, "dy", dy);
  if (!dx.defined()) return;
  check_cpu_f32(op, "dx", dx);
  if (dx.ndim() != 3) {
    throw ShapeError(std::string(op) + ": expected dx of shape [B, N, D], found " +
                     dx.shape().str());
  }
  const int64_t b = dx.size(0), n = dx.size(1), d = dx.size(2);
  check_shape(op, "dy", dy, Shape{b, d});
  check_start(op, n, start);
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
  const float inv = 1.0f / static_cast<float>(n - start);
#pragma omp parallel for collapse(2) schedule(static) if (b * n * d > 65536)
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t t = start; t < n; ++t) {
      float* dxr = pdx + (i * n + t) * d;
      const float* dyr = pdy + i * d;
      for (int64_t j = 0; j < d; ++j) dxr[j] += dyr[j] * inv;
    }
  }
}

}  // namespace vitpe
