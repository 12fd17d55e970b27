// Reference mean over tokens: double accumulation (see ops/reference.h).
#include "ops/reference.h"

namespace vitpe::ref {

Tensor mean_tokens(const Tensor& x, int64_t start) {
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  Tensor y = Tensor::empty(Shape{b, d});
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      double s = 0;
      for (int64_t t = start; t < n; ++t) s += x.at((i * n + t) * d + j);
      y.at(i * d + j) = static_cast<float>(s / static_cast<double>(n - start));
    }
  }
  return y;
}

}  // namespace vitpe::ref
