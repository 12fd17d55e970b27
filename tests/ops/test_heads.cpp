// split_heads / merge_heads (ops/cpu/heads.cpp) against naive index formulas, and their
// backwards against central finite differences.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "ops/ops.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

TEST(SplitHeads, ForwardMatchesIndexFormula) {
  for (auto [b, n, h, hd] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 197, 6, 64},
                             {2, 49, 3, 32},
                             {1, 5, 2, 3}}) {
    Tensor qkv = random_tensor(Shape{b, n, 3 * h * hd}, 1);
    Tensor q = Tensor::empty(Shape{b, h, n, hd}), k = Tensor::empty(q.shape()),
           v = Tensor::empty(q.shape());
    split_heads_forward(q, k, v, qkv, h);
    Tensor* outs[3] = {&q, &k, &v};
    for (int p = 0; p < 3; ++p)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t t = 0; t < n; ++t)
            for (int64_t c = 0; c < hd; ++c)
              ASSERT_EQ(outs[p]->at(((i * h + hh) * n + t) * hd + c),
                        qkv.at((i * n + t) * 3 * h * hd + p * h * hd + hh * hd + c));

    // merge is the inverse layout change of one part: merge(q) is the q third of qkv.
    Tensor y = Tensor::empty(Shape{b, n, h * hd});
    merge_heads_forward(y, q);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < h * hd; ++c)
          ASSERT_EQ(y.at((i * n + t) * h * hd + c), qkv.at((i * n + t) * 3 * h * hd + c));
  }
}

TEST(SplitHeads, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t b = 2, n = 3, h = 2, hd = 2;
  Tensor qkv = random_tensor(Shape{b, n, 3 * h * hd}, 2);
  Tensor wq = random_tensor(Shape{b, h, n, hd}, 3), wk = random_tensor(wq.shape(), 4),
         wv = random_tensor(wq.shape(), 5);
  Tensor q = Tensor::empty(wq.shape()), k = Tensor::empty(wq.shape()),
         v = Tensor::empty(wq.shape());
  Tensor num = numeric_grad(qkv, [&] {
    split_heads_forward(q, k, v, qkv, h);
    return weighted_sum(q, wq) + weighted_sum(k, wk) + weighted_sum(v, wv);
  });
  Tensor d = Tensor::full(qkv.shape(), 1.0f);
  split_heads_backward(d, wq, wk, wv);
  for (int64_t i = 0; i < d.numel(); ++i) d.at(i) -= 1.0f;
  EXPECT_LT(max_rel_error(d, num), 1e-6);  // a permutation: the loss is linear, FD is exact
  // An undefined part contributes nothing.
  Tensor dk_only = Tensor::zeros(qkv.shape()), none;
  split_heads_backward(dk_only, none, wk, none);
  for (int64_t i = 0; i < b * n; ++i)
    for (int64_t c = 0; c < 3 * h * hd; ++c) {
      const bool is_k = c >= h * hd && c < 2 * h * hd;
      if (!is_k) {
        ASSERT_EQ(dk_only.at(i * 3 * h * hd + c), 0.0f);
      }
    }
}

TEST(MergeHeads, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t b = 2, n = 3, h = 2, hd = 3;
  Tensor o = random_tensor(Shape{b, h, n, hd}, 6);
  Tensor w = random_tensor(Shape{b, n, h * hd}, 7);
  Tensor y = Tensor::empty(w.shape());
  Tensor num = numeric_grad(o, [&] {
    merge_heads_forward(y, o);
    return weighted_sum(y, w);
  });
  Tensor d = Tensor::full(o.shape(), -1.0f);
  merge_heads_backward(d, w);
  for (int64_t i = 0; i < d.numel(); ++i) d.at(i) += 1.0f;
  EXPECT_LT(max_rel_error(d, num), 1e-6);
}

TEST(Heads, ShapeErrorsNameOpAndShapes) {
  Tensor qkv = Tensor::zeros(Shape{2, 5, 36});
  Tensor q = Tensor::zeros(Shape{2, 2, 5, 6}), k = Tensor::zeros(Shape{2, 2, 5, 6}),
         v = Tensor::zeros(Shape{2, 2, 5, 5});
  try {
    split_heads_forward(q, k, v, qkv, 2);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("split_heads_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 2, 5, 6]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 2, 5, 5]"), std::string::npos) << msg;
  }
  EXPECT_THROW(split_heads_forward(q, k, v, qkv, 5), ShapeError);  // 36 is not 3 * 5 * hd
  Tensor y = Tensor::zeros(Shape{2, 5, 13});
  EXPECT_THROW(merge_heads_forward(y, q), ShapeError);
}

}  // namespace
}  // namespace vitpe
