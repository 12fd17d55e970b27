// Checks shared by the two RoPE test files.
#pragma once

#include <map>

#include "encodings/encoding.h"
#include "tests/testing.h"

namespace vitpe::testing {

// <rot(q, p1), rot(k, p2)> depends only on p2 - p1: the same random q (and k) at every position,
// rotated through the encoding, compared over all pairs with equal offsets. Also checks that the
// score does change with the offset (the rotation is not the identity).
inline void check_relative_property(AttentionEncoding& e, int64_t H, int64_t hd, Grid w,
                                    int64_t prefix) {
  const int64_t N = prefix + w.count();
  Tensor qv = random_tensor({H, hd}, 21), kv = random_tensor({H, hd}, 22);
  Tensor q = Tensor::empty({1, H, N, hd}), k = Tensor::empty({1, H, N, hd});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < hd; ++c) {
        q.at((h * N + n) * hd + c) = qv.at(h * hd + c);
        k.at((h * N + n) * hd + c) = kv.at(h * hd + c);
      }
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
  e.rotate(qo, ko, q, k, {w, prefix});
  for (int64_t h = 0; h < H; ++h) {
    std::map<std::pair<int64_t, int64_t>, double> seen;
    double worst = 0, lo = 1e30, hi = -1e30;
    for (int64_t i = 0; i < w.count(); ++i)
      for (int64_t j = 0; j < w.count(); ++j) {
        double s = 0;
        for (int64_t c = 0; c < hd; ++c)
          s += static_cast<double>(qo.at((h * N + prefix + i) * hd + c)) *
               ko.at((h * N + prefix + j) * hd + c);
        auto off = std::make_pair(j / w.cols - i / w.cols, j % w.cols - i % w.cols);
        auto [it, fresh] = seen.emplace(off, s);
        if (!fresh) worst = std::max(worst, std::fabs(it->second - s));
        lo = std::min(lo, s), hi = std::max(hi, s);
      }
    EXPECT_LT(worst, 1e-5) << e.kind() << " head " << h << " window " << w.str();
    EXPECT_GT(hi - lo, 0.1) << e.kind() << ": scores do not depend on the offset";
  }
  // Prefix tokens are not rotated.
  for (int64_t h = 0; h < H; ++h)
    for (int64_t n = 0; n < prefix; ++n)
      for (int64_t c = 0; c < hd; ++c)
        EXPECT_EQ(qo.at((h * N + n) * hd + c), q.at((h * N + n) * hd + c));
}

// A rotation keeps every token's norm: q of H = 1 head, hd channels on window w (no prefix).
inline void check_preserves_norms(AttentionEncoding& e, int64_t hd, Grid w) {
  const int64_t N = w.count();
  Tensor q = random_tensor({1, 1, N, hd}, 2), qo = Tensor::empty(q.shape());
  Tensor ko = Tensor::empty(q.shape());
  e.rotate(qo, ko, q, q, {w, 0});
  for (int64_t n = 0; n < N; ++n) {
    double a = 0, b = 0;
    for (int64_t c = 0; c < hd; ++c)
      a += q.at(n * hd + c) * q.at(n * hd + c), b += qo.at(n * hd + c) * qo.at(n * hd + c);
    EXPECT_NEAR(a, b, 1e-4 * a) << e.kind() << " token " << n;
  }
}

// dq, dk (and the learned frequencies' gradients) against finite differences of
// L = sum(wq * q_out) + sum(wk * k_out).
inline void check_rotate_backward(AttentionEncoding& e, int64_t H, int64_t hd, Grid w,
                                  int64_t prefix) {
  const int64_t N = prefix + w.count();
  Tensor q = random_tensor({2, H, N, hd}, 31), k = random_tensor({2, H, N, hd}, 32);
  Tensor wq = random_tensor({2, H, N, hd}, 33), wk = random_tensor({2, H, N, hd}, 34);
  Tensor dq = Tensor::zeros(q.shape()), dk = Tensor::zeros(k.shape());
  for (Param* p : e.params()) p->grad.zero();
  e.rotate_backward(dq, dk, wq, wk, q, k, {w, prefix});
  auto loss = [&] {
    Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
    e.rotate(qo, ko, q, k, {w, prefix});
    return weighted_sum(qo, wq) + weighted_sum(ko, wk);
  };
  EXPECT_LT(max_rel_error(dq, numeric_grad(q, loss)), 1e-3) << e.kind() << " dq";
  EXPECT_LT(max_rel_error(dk, numeric_grad(k, loss)), 1e-3) << e.kind() << " dk";
  for (Param* p : e.params())
    EXPECT_LT(max_rel_error(p->grad, numeric_grad(p->value, loss, 1e-3)), 2e-3)
        << e.kind() << " " << p->name;
}

}  // namespace vitpe::testing
