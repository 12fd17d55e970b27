// Independent references for attention's positional terms, built the way timm builds them
// (double accumulation): dense relative-position bias, ALiBi-2D, Swin's shift mask and RoPE. The
// CPU tests of ops/attention_terms.h and the GPU tests of the attention kernel both compare
// against these.
#pragma once

#include <cmath>
#include <vector>

#include "ops/tensor.h"

namespace vitpe::testing {

// Dense relative-position bias [H, N, N] from a table [(2Mh-1)(2Mw-1) (+3), H] (timm, and
// BEiT's three prefix rows: L prefix->patch, L+1 patch->prefix, L+2 prefix->prefix).
inline Tensor relbias_dense(const Tensor& table, int64_t H, int64_t prefix, int64_t Mh,
                            int64_t Mw) {
  const int64_t N = prefix + Mh * Mw, L = (2 * Mh - 1) * (2 * Mw - 1);
  Tensor out = Tensor::empty(Shape{H, N, N});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        int64_t idx;
        if (i < prefix && j < prefix) {
          idx = L + 2;
        } else if (i < prefix) {
          idx = L;
        } else if (j < prefix) {
          idx = L + 1;
        } else {
          const int64_t yi = (i - prefix) / Mw, xi = (i - prefix) % Mw;
          const int64_t yj = (j - prefix) / Mw, xj = (j - prefix) % Mw;
          idx = (yi - yj + Mh - 1) * (2 * Mw - 1) + (xi - xj + Mw - 1);
        }
        out.at((h * N + i) * N + j) = table.at(idx * H + h);
      }
  return out;
}

// Dense ALiBi-2D bias [H, N, N]: -slope_h * distance, 0 for pairs with a prefix token.
inline Tensor alibi_dense(int64_t H, int64_t prefix, int64_t Mh, int64_t Mw) {
  const int64_t N = prefix + Mh * Mw;
  Tensor out = Tensor::zeros(Shape{H, N, N});
  for (int64_t h = 0; h < H; ++h) {
    const double slope = std::pow(2.0, -8.0 * (h + 1) / H);
    for (int64_t i = prefix; i < N; ++i)
      for (int64_t j = prefix; j < N; ++j) {
        const double dy = static_cast<double>((i - prefix) / Mw - (j - prefix) / Mw);
        const double dx = static_cast<double>((i - prefix) % Mw - (j - prefix) % Mw);
        out.at((h * N + i) * N + j) = static_cast<float>(-slope * std::sqrt(dy * dy + dx * dx));
      }
  }
  return out;
}

// Swin's shift mask [nW, N, N] built as timm does: label the R x C image by the slices
// [0, R-M), [R-M, R-s), [R-s, R) per axis, partition the labels into windows, -100 where the
// labels of two tokens of a window differ.
inline Tensor shift_mask_dense(int64_t R, int64_t C, int64_t Mh, int64_t Mw, int64_t sr,
                               int64_t sc) {
  std::vector<int> img(R * C);
  const int64_t hs[4] = {0, R - Mh, R - sr, R}, ws[4] = {0, C - Mw, C - sc, C};
  int cnt = 0;
  for (int a = 0; a < 3; ++a)
    for (int bb = 0; bb < 3; ++bb, ++cnt)
      for (int64_t y = hs[a]; y < hs[a + 1]; ++y)
        for (int64_t x = ws[bb]; x < ws[bb + 1]; ++x) img[y * C + x] = cnt;
  const int64_t nWy = R / Mh, nWx = C / Mw, N = Mh * Mw;
  Tensor out = Tensor::zeros(Shape{nWy * nWx, N, N});
  for (int64_t wy = 0; wy < nWy; ++wy)
    for (int64_t wx = 0; wx < nWx; ++wx) {
      std::vector<int> lab(N);
      for (int64_t t = 0; t < N; ++t) lab[t] = img[(wy * Mh + t / Mw) * C + wx * Mw + t % Mw];
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j)
          if (lab[i] != lab[j]) out.at(((wy * nWx + wx) * N + i) * N + j) = -100.f;
    }
  return out;
}

// RoPE on x [B, H, N, hd] with freqs [H, hd/2, 2] (angle = x*f0 + y*f1), prefix not rotated.
inline Tensor rope_ref(const Tensor& x, const Tensor& freqs, int64_t prefix, int64_t Mw) {
  const int64_t B = x.size(0), H = x.size(1), N = x.size(2), hd = x.size(3);
  Tensor out = x.clone();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = prefix; n < N; ++n) {
        const double yy = static_cast<double>((n - prefix) / Mw);
        const double xx = static_cast<double>((n - prefix) % Mw);
        const int64_t base = ((b * H + h) * N + n) * hd;
        for (int64_t k = 0; k < hd / 2; ++k) {
          const double ang =
              xx * freqs.at((h * (hd / 2) + k) * 2) + yy * freqs.at((h * (hd / 2) + k) * 2 + 1);
          const double a = x.at(base + 2 * k), c = x.at(base + 2 * k + 1);
          out.at(base + 2 * k) = static_cast<float>(a * std::cos(ang) - c * std::sin(ang));
          out.at(base + 2 * k + 1) = static_cast<float>(a * std::sin(ang) + c * std::cos(ang));
        }
      }
  return out;
}

inline Tensor add_tensors(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b.clone();
  if (!b.defined()) return a.clone();
  Tensor out = a.clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.at(i) += b.at(i);
  return out;
}

}  // namespace vitpe::testing
