// Reference elementwise ops: exact GELU with std::erf in double, the layer-scaled residual add
// (see ops/reference.h).
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

Tensor layer_scale_add(const Tensor& x, const Tensor& gamma, const Tensor& a) {
  Tensor y = Tensor::empty(x.shape());
  const int64_t D = gamma.numel();
  for (int64_t i = 0; i < x.numel(); ++i) {
    y.at(i) = static_cast<float>(static_cast<double>(x.at(i)) +
                                 static_cast<double>(gamma.at(i % D)) * a.at(i));
  }
  return y;
}

}  // namespace vitpe::ref
