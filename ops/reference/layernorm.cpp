// Reference LayerNorm: plain loops, double accumulation (see ops/reference.h).
#include <cmath>

#include "ops/reference.h"

namespace vitpe::ref {

LayerNormOut layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  const int64_t d = x.size(-1), m = x.numel() / d;
  LayerNormOut o{Tensor::empty(x.shape()), Tensor::empty(Shape{m}), Tensor::empty(Shape{m})};
  for (int64_t r = 0; r < m; ++r) {
    double mean = 0;
    for (int64_t i = 0; i < d; ++i) mean += x.at(r * d + i);
    mean /= static_cast<double>(d);
    double var = 0;
    for (int64_t i = 0; i < d; ++i) {
      const double c = x.at(r * d + i) - mean;
      var += c * c;
    }
    var /= static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < d; ++i) {
      o.y.at(r * d + i) =
          static_cast<float>((x.at(r * d + i) - mean) * rstd * gamma.at(i) + beta.at(i));
    }
    o.mean.at(r) = static_cast<float>(mean);
    o.rstd.at(r) = static_cast<float>(rstd);
  }
  return o;
}

}  // namespace vitpe::ref
