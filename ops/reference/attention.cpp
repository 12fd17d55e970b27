// Reference attention: softmax(q k^T * scale + bias + mask) v with plain loops and double
// accumulation (see ops/reference.h and attention_forward in ops/ops.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/reference.h"

namespace vitpe::ref {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& bias,
                 const Tensor& mask) {
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2), hd = q.size(3);
  const int64_t windows = mask.defined() ? mask.size(0) : 1;
  Tensor out = Tensor::empty(q.shape());
  std::vector<double> s(n);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const int64_t base = (bi * h + hi) * n * hd;
      for (int64_t i = 0; i < n; ++i) {
        double mx = -1e300;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < hd; ++c) {
            dot += static_cast<double>(q.at(base + i * hd + c)) * k.at(base + j * hd + c);
          }
          s[j] = dot * scale;
          if (bias.defined()) s[j] += bias.at((hi * n + i) * n + j);
          if (mask.defined()) s[j] += mask.at(((bi % windows) * n + i) * n + j);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t c = 0; c < hd; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += s[j] * v.at(base + j * hd + c);
          out.at(base + i * hd + c) = static_cast<float>(acc / sum);
        }
      }
    }
  }
  return out;
}

Tensor latent_attention(const Tensor& q, const Tensor& kv, int64_t heads, float scale) {
  const int64_t b = kv.size(0), n = kv.size(1), d = q.size(0), hd = d / heads;
  Tensor out = Tensor::empty({b, d});
  std::vector<double> s(n);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < heads; ++h) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < hd; ++c) {
          dot += static_cast<double>(q.at(h * hd + c)) * kv.at((bi * n + j) * 2 * d + h * hd + c);
        }
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - mx);
      for (int64_t c = 0; c < hd; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += s[j] * kv.at((bi * n + j) * 2 * d + d + h * hd + c);
        out.at(bi * d + h * hd + c) = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

}  // namespace vitpe::ref
