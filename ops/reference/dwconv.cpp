// Reference depthwise 3x3 convolution with its residual (CPVT's PEG): each channel as an image
// [rows, cols] with a border of zeros, convolved in double (see ops/reference.h).
#include <algorithm>
#include <vector>

#include "ops/reference.h"

namespace vitpe::ref {

Tensor dwconv3x3(const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows, int64_t cols,
                 int64_t prefix) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2);
  Tensor y = x.clone();  // prefix tokens and the residual
  std::vector<double> padded((rows + 2) * (cols + 2));
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t d = 0; d < D; ++d) {
      std::fill(padded.begin(), padded.end(), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          padded[(r + 1) * (cols + 2) + c + 1] = x.at((i * N + prefix + r * cols + c) * D + d);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          double s = b.at(d);
          for (int64_t u = 0; u < 3; ++u)
            for (int64_t v = 0; v < 3; ++v)
              s += w.at(d * 9 + u * 3 + v) * padded[(r + u) * (cols + 2) + c + v];
          const int64_t at = (i * N + prefix + r * cols + c) * D + d;
          y.at(at) = static_cast<float>(x.at(at) + s);
        }
      }
    }
  }
  return y;
}

}  // namespace vitpe::ref
