// Reference linear layer: plain loops with double accumulation (the definition the fast path
// in ops/cpu/linear.cpp is tested against).
#include <cmath>

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
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b.defined() ? b.at(j) : 0.0;
      for (int64_t l = 0; l < k; ++l) s += static_cast<double>(x.at(i * k + l)) * wf.at(j * k + l);
      if (act == Act::gelu) s = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
      if (residual.defined()) s += residual.at(i * n + j);
      y.at(i * n + j) = static_cast<float>(s);
    }
  }
  return y;
}

// dy: [..., N] -> dx = dy w: [..., K], dw = dy^T x: [N, K], db = sum of dy rows: [N]
LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w) {
  const Tensor wf = weights_f32(w);
  const int64_t n = wf.size(0), k = wf.size(1), m = x.numel() / k;
  LinearGrads g{Tensor::empty(x.shape()), Tensor::empty(wf.shape()), Tensor::empty(Shape{n})};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t l = 0; l < k; ++l) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += static_cast<double>(dy.at(i * n + j)) * wf.at(j * k + l);
      g.dx.at(i * k + l) = static_cast<float>(s);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t l = 0; l < k; ++l) {
      double s = 0;
      for (int64_t i = 0; i < m; ++i) s += static_cast<double>(dy.at(i * n + j)) * x.at(i * k + l);
      g.dw.at(j * k + l) = static_cast<float>(s);
    }
    double s = 0;
    for (int64_t i = 0; i < m; ++i) s += dy.at(i * n + j);
    g.db.at(j) = static_cast<float>(s);
  }
  return g;
}

}  // namespace vitpe::ref
