// Reference softmax over the last dimension: double accumulation (see ops/reference.h).
#include <algorithm>
#include <cmath>

#include "ops/reference.h"

namespace vitpe::ref {

Tensor softmax(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape());
  const int64_t c = x.size(-1), m = c == 0 ? 0 : x.numel() / c;
  for (int64_t r = 0; r < m; ++r) {
    double mx = x.at(r * c);
    for (int64_t i = 0; i < c; ++i) mx = std::max(mx, static_cast<double>(x.at(r * c + i)));
    double sum = 0;
    for (int64_t i = 0; i < c; ++i) sum += std::exp(x.at(r * c + i) - mx);
    for (int64_t i = 0; i < c; ++i) {
      y.at(r * c + i) = static_cast<float>(std::exp(x.at(r * c + i) - mx) / sum);
    }
  }
  return y;
}

}  // namespace vitpe::ref
