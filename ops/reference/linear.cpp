// Reference linear layer: plain loops with double accumulation (the definition the fast path
// in ops/cpu/linear.cpp is tested against).
#include <cmath>
#include <vector>

#include "ops/reference.h"

namespace vitpe::ref {

namespace {
// w as f32 (a bf16 w is widened exactly).
Tensor weights_f32(const Tensor& w) { return w.dtype() == DType::f32 ? w : w.to(DType::f32); }
}  // namespace

// x: [..., K], w: [N, K], b: [N] or undefined, residual: [..., N] or undefined -> [..., N]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Act act, const Tensor& residual) {
  const Tensor wf = weights_f32(w);
  const int64_t n = wf.size(0), k = wf.size(1), m = x.numel() / k;
  Shape ys = x.shape();
  ys[ys.size() - 1] = n;
  Tensor y = Tensor::empty(ys);
  const float* xp = x.f32();
  const float* wp = wf.f32();
  const float* bp = b.defined() ? b.f32() : nullptr;
  const float* rp = residual.defined() ? residual.f32() : nullptr;
  float* yp = y.f32();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bp ? bp[j] : 0.0;
      for (int64_t l = 0; l < k; ++l) s += static_cast<double>(xp[i * k + l]) * wp[j * k + l];
      if (act == Act::gelu) s = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
      if (act == Act::quick_gelu) s = s / (1.0 + std::exp(-1.702 * s));
      if (rp) s += rp[i * n + j];
      yp[i * n + j] = static_cast<float>(s);
    }
  }
  return y;
}

// dy: [..., N] -> dx = dy w: [..., K], dw = dy^T x: [N, K], db = sum of dy rows: [N]
LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w) {
  const Tensor wf = weights_f32(w);
  const int64_t n = wf.size(0), k = wf.size(1), m = x.numel() / k;
  LinearGrads g{Tensor::empty(x.shape()), Tensor::empty(wf.shape()), Tensor::empty(Shape{n})};
  const float* dyp = dy.f32();
  const float* xp = x.f32();
  const float* wp = wf.f32();
  // Accumulate in double buffers, then round once.
  std::vector<double> dx(static_cast<size_t>(m * k), 0.0), dw(static_cast<size_t>(n * k), 0.0);
  std::vector<double> db(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double d = dyp[i * n + j];
      db[j] += d;
      for (int64_t l = 0; l < k; ++l) {
        dx[i * k + l] += d * wp[j * k + l];
        dw[j * k + l] += d * xp[i * k + l];
      }
    }
  }
  for (int64_t i = 0; i < m * k; ++i) g.dx.f32()[i] = static_cast<float>(dx[i]);
  for (int64_t i = 0; i < n * k; ++i) g.dw.f32()[i] = static_cast<float>(dw[i]);
  for (int64_t j = 0; j < n; ++j) g.db.f32()[j] = static_cast<float>(db[j]);
  return g;
}

}  // namespace vitpe::ref
