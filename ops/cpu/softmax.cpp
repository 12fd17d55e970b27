// Softmax over the last dimension on the CPU, forward and backward.
//
// x: [..., C] is M = numel / C rows, split over the OpenMP threads. The exponential is the
// SIMD exp of ops/cpu/vec_math.h; rows are shifted by their maximum first so it
// never overflows. Backward: dx += y * (dy - sum(dy * y)).
#include <string>

#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

VITPE_AVX2 void softmax_row_avx2(float* y, const float* x, int64_t c) {
  cpu::softmax_row<cpu::f32x8>(y, x, 1.0f, nullptr, nullptr, c);
}
void softmax_row_base(float* y, const float* x, int64_t c) {
  cpu::softmax_row<cpu::f32x4>(y, x, 1.0f, nullptr, nullptr, c);
}

void check_like(const char* op, const char* what, const Tensor& t, const char* ref_what,
                const Tensor& ref) {
  check_cpu_f32(op, what, t);
  if (t.shape() != ref.shape()) {
    throw ShapeError(std::string(op) + ": expected " + what + " of shape " + ref.shape().str() +
                     " (the shape of " + ref_what + "), found " + t.shape().str());
  }
}

}  // namespace

void softmax_forward(Tensor& y, const Tensor& x) {
  const OpScope scope(OpClass::softmax);
  const char* op = "softmax_forward";
  check_cpu_f32(op, "x", x);
  check_like(op, "y", y, "x", x);
  if (x.ndim() < 1) throw ShapeError(std::string(op) + ": x has no dimensions");
  const int64_t c = x.size(-1);
  if (c == 0 || x.numel() == 0) return;
  const int64_t m = x.numel() / c;
  const float* px = x.f32();
  float* py = y.f32();
  const bool avx2 = cpu::cpu_has_avx2_fma();
#pragma omp parallel for schedule(static) if (m * c > 16384)
  for (int64_t r = 0; r < m; ++r) {
    if (avx2)
      softmax_row_avx2(py + r * c, px + r * c, c);
    else
      softmax_row_base(py + r * c, px + r * c, c);
  }
}

void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  const OpScope scope(OpClass::softmax);
  const char* op = "softmax_backward";
  check_cpu_f32(op, "y", y);
  check_like(op, "dy", dy, "y", y);
  if (!dx.defined()) return;
  check_like(op, "dx", dx, "y", y);
  if (y.ndim() < 1) throw ShapeError(std::string(op) + ": y has no dimensions");
  const int64_t c = y.size(-1);
  if (c == 0 || y.numel() == 0) return;
  const int64_t m = y.numel() / c;
  const float* py = y.f32();
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
#pragma omp parallel for schedule(static) if (m * c > 16384)
  for (int64_t r = 0; r < m; ++r) {
    const float* yr = py + r * c;
    const float* dyr = pdy + r * c;
    float* dxr = pdx + r * c;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 0; i < c; ++i) dot += dyr[i] * yr[i];
    for (int64_t i = 0; i < c; ++i) dxr[i] += yr[i] * (dyr[i] - dot);
  }
}

}  // namespace vitpe
