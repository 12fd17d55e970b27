// cosine_qk_forward / cosine_qk_backward (ops/cpu/cosine.cpp), Swin V2's scaled cosine
// attention inputs: against the double reference, finite differences for q, k and logit_scale
// (also with one head clamped at max_log, where timm's clamp passes no gradient), thread-count
// independence, and shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

const float kMaxLog = static_cast<float>(std::log(100.0));

TEST(CosineQk, ForwardMatchesReference) {
  for (const Shape& s : {Shape{2, 3, 49, 32}, Shape{1, 2, 5, 7}, Shape{4, 6, 197, 64}}) {
    const Tensor q = random_tensor(s, 1), k = random_tensor(s, 2);
    Tensor ls = random_tensor({s[1], 1, 1}, 3, 1.0);
    ls.at(0) = 5.0f;  // above log(100): clamped
    Tensor qn = Tensor::full(s, 1e9f), kn = Tensor::full(s, 1e9f);
    cosine_qk_forward(qn, kn, q, k, ls, kMaxLog);
    const auto [want_q, want_k] = ref::cosine_qk(q, k, ls, kMaxLog);
    EXPECT_LT(max_rel_error(qn, want_q), 1e-5) << s.str();
    EXPECT_LT(max_rel_error(kn, want_k), 1e-5) << s.str();
  }
}

TEST(CosineQk, BackwardMatchesFiniteDifferences) {
  const Shape s{2, 3, 4, 8};
  Tensor q = random_tensor(s, 4), k = random_tensor(s, 5);
  Tensor ls = Tensor::from({3, 1, 1}, {std::log(10.0f), 0.3f, 5.0f});  // head 2 clamped
  const Tensor wq = random_tensor(s, 6), wk = random_tensor(s, 7);
  auto loss = [&] {
    const auto [qn, kn] = ref::cosine_qk(q, k, ls, kMaxLog);
    return weighted_sum(qn, wq) + weighted_sum(kn, wk);
  };
  Tensor dq = Tensor::full(s, 1e9f), dk = Tensor::full(s, 1e9f);  // overwritten
  Tensor dls = Tensor::full({3, 1, 1}, 0.5f);                     // accumulated
  cosine_qk_backward(dq, dk, dls, wq, wk, q, k, ls, kMaxLog);
  EXPECT_LT(max_rel_error(dq, numeric_grad(q, loss)), 1e-3);
  EXPECT_LT(max_rel_error(dk, numeric_grad(k, loss)), 1e-3);
  Tensor want = numeric_grad(ls, loss);
  EXPECT_NEAR(want.at(2), 0.0, 1e-6);  // the clamp passes nothing
  for (int64_t h = 0; h < 3; ++h) want.at(h) += 0.5f;
  EXPECT_LT(max_rel_error(dls, want), 1e-3);
}

TEST(CosineQk, GradientDoesNotDependOnTheThreadCount) {
  const Shape s{8, 4, 64, 32};
  const Tensor q = random_tensor(s, 8), k = random_tensor(s, 9), g = random_tensor(s, 10);
  const Tensor ls = random_tensor({4}, 11, 0.5);
  const int saved = num_threads();
  Tensor dq = Tensor::empty(s), dk = Tensor::empty(s);
  Tensor d1 = Tensor::zeros({4}), d2 = Tensor::zeros({4});
  set_num_threads(1);
  cosine_qk_backward(dq, dk, d1, g, g, q, k, ls, kMaxLog);
  set_num_threads(2);
  cosine_qk_backward(dq, dk, d2, g, g, q, k, ls, kMaxLog);
  set_num_threads(saved);
  EXPECT_EQ(max_rel_error(d1, d2), 0.0);
}

TEST(CosineQk, ShapeErrorsSayWhatWasExpected) {
  const Tensor q = random_tensor({1, 3, 4, 8}, 1);
  Tensor qn = Tensor::empty(q.shape()), kn = Tensor::empty(q.shape());
  const std::string m = testing::message_of([&] {
    cosine_qk_forward(qn, kn, q, q, Tensor::zeros({2, 1, 1}), kMaxLog);
  });
  EXPECT_NE(m.find("expected logit_scale with 3 values"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 1, 1]"), std::string::npos) << m;
  const std::string m2 = testing::message_of([&] {
    cosine_qk_forward(qn, kn, q, random_tensor({1, 3, 4, 9}, 2), Tensor::zeros({3}), kMaxLog);
  });
  EXPECT_NE(m2.find("[1, 3, 4, 9]"), std::string::npos) << m2;
}

}  // namespace
}  // namespace vitpe
