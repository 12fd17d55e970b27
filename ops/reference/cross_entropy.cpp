// Reference cross entropy with label smoothing, in double (see ops/reference.h):
// mean over rows of -sum_c t_c log softmax(z)_c with t = (1 - s) one-hot + s / C.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/reference.h"

namespace vitpe::ref {

double cross_entropy(const Tensor& logits, const int32_t* targets, float smoothing) {
  const int64_t b = logits.size(0), c = logits.size(1);
  double total = 0;
  std::vector<double> logp(c);
  for (int64_t r = 0; r < b; ++r) {
    double mx = logits.at(r * c);
    for (int64_t i = 0; i < c; ++i) mx = std::max(mx, static_cast<double>(logits.at(r * c + i)));
    double sum = 0;
    for (int64_t i = 0; i < c; ++i) sum += std::exp(logits.at(r * c + i) - mx);
    for (int64_t i = 0; i < c; ++i) logp[i] = logits.at(r * c + i) - mx - std::log(sum);
    for (int64_t i = 0; i < c; ++i) {
      const double t =
          (i == targets[r] ? 1.0 - smoothing : 0.0) + smoothing / static_cast<double>(c);
      total -= t * logp[i];
    }
  }
  return total / static_cast<double>(b);
}

}  // namespace vitpe::ref
