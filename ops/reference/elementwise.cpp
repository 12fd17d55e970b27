// Reference elementwise ops: exact GELU with std::erf in double, the layer-scaled residual add
// and Swin V2's normalised q, k (see ops/reference.h).
#include <algorithm>
#include <cmath>

#include "ops/reference.h"

namespace vitpe::ref {

Tensor gelu(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.at(i);
    y.at(i) = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
  return y;
}

Tensor quick_gelu(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.at(i);
    y.at(i) = static_cast<float>(v / (1.0 + std::exp(-1.702 * v)));
  }
  return y;
}

Tensor layer_scale_add(const Tensor& x, const Tensor& gamma, const Tensor& a) {
  Tensor y = Tensor::empty(x.shape());
  const int64_t D = gamma.numel();
  for (int64_t i = 0; i < x.numel(); ++i) {
    y.at(i) = static_cast<float>(static_cast<double>(x.at(i)) +
                                 static_cast<double>(gamma.at(i % D)) * a.at(i));
  }
  return y;
}

Tensor swiglu(const Tensor& x) {
  const int64_t two_h = x.size(-1), H = two_h / 2, rows = x.numel() / two_h;
  Tensor y = Tensor::empty(x.shape().with_last(H));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < H; ++j) {
      const double g = x.at(r * two_h + j), v = x.at(r * two_h + H + j);
      y.at(r * H + j) = static_cast<float>(g / (1.0 + std::exp(-g)) * v);
    }
  }
  return y;
}

std::pair<Tensor, Tensor> cosine_qk(const Tensor& q, const Tensor& k, const Tensor& logit_scale,
                                    float max_log) {
  const int64_t H = q.size(1), N = q.size(2), hd = q.size(3), rows = q.numel() / hd;
  Tensor qn = Tensor::empty(q.shape()), kn = Tensor::empty(k.shape());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = (r / N) % H;
    const double s =
        std::exp(std::min(static_cast<double>(logit_scale.at(h)), static_cast<double>(max_log)));
    double sq = 0, sk = 0;
    for (int64_t d = 0; d < hd; ++d) {
      sq += static_cast<double>(q.at(r * hd + d)) * q.at(r * hd + d);
      sk += static_cast<double>(k.at(r * hd + d)) * k.at(r * hd + d);
    }
    const double nq = std::max(std::sqrt(sq), 1e-12), nk = std::max(std::sqrt(sk), 1e-12);
    for (int64_t d = 0; d < hd; ++d) {
      qn.at(r * hd + d) = static_cast<float>(s * q.at(r * hd + d) / nq);
      kn.at(r * hd + d) = static_cast<float>(k.at(r * hd + d) / nk);
    }
  }
  return {qn, kn};
}

}  // namespace vitpe::ref
