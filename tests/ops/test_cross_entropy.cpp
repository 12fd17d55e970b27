// cross_entropy_forward / cross_entropy_backward (ops/cpu/cross_entropy.cpp) against the double
// reference (ops/reference/cross_entropy.cpp) and its central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;

std::vector<int32_t> targets_for(int64_t b, int64_t c, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(b);
  for (auto& v : t) v = static_cast<int32_t>(rng.below(c));
  return t;
}

TEST(CrossEntropyForward, MatchesReference) {
  for (float smoothing : {0.0f, 0.1f}) {
    for (auto [b, c] : {std::pair<int64_t, int64_t>{3, 10}, {4, 1000}, {1, 7}, {64, 100}}) {
      Tensor logits = random_tensor(Shape{b, c}, 1, 4.0);
      auto t = targets_for(b, c, 2);
      Tensor probs = Tensor::full(Shape{b, c}, 1e9f);
      const float loss = cross_entropy_forward(probs, logits, t.data(), smoothing);
      const double want = ref::cross_entropy(logits, t.data(), smoothing);
      EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << b << "x" << c << " s " << smoothing;
      EXPECT_LT(max_rel_error(probs, ref::softmax(logits)), 1e-5);
    }
  }
}

// Enough logits for the rows to be shared out over the threads (128 x 1000, ImageNet's classes):
// the loss is the same bits on 1, 2 and 3 threads (the rows' losses are added in row order),
// and so are the probabilities and the gradient.
TEST(CrossEntropy, SameBitsOnAnyThreadCount) {
  const int before = num_threads();
  const int64_t b = 128, c = 1000;
  Tensor logits = random_tensor(Shape{b, c}, 5, 4.0);
  auto t = targets_for(b, c, 6);
  const double want = ref::cross_entropy(logits, t.data(), 0.1f);
  float first = 0;
  Tensor first_probs, first_grad;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor probs = Tensor::empty(Shape{b, c}), grad = Tensor::zeros(Shape{b, c});
    const float loss = cross_entropy_forward(probs, logits, t.data(), 0.1f);
    cross_entropy_backward(grad, probs, t.data(), 0.1f);
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << threads << " threads";
    if (threads == 1) {
      first = loss;
      first_probs = probs.clone();
      first_grad = grad.clone();
    }
    EXPECT_EQ(loss, first) << threads << " threads";
    EXPECT_EQ(max_rel_error(probs, first_probs), 0.0) << threads << " threads";
    EXPECT_EQ(max_rel_error(grad, first_grad), 0.0) << threads << " threads";
  }
  set_num_threads(before);
}

TEST(CrossEntropyForward, KnownValue) {
  // Uniform logits: the loss is log C whatever the target and the smoothing.
  Tensor logits = Tensor::full(Shape{2, 8}, 3.0f);
  Tensor probs = Tensor::empty(Shape{2, 8});
  std::vector<int32_t> t = {0, 7};
  EXPECT_NEAR(cross_entropy_forward(probs, logits, t.data(), 0.0f), std::log(8.0), 1e-6);
  EXPECT_NEAR(cross_entropy_forward(probs, logits, t.data(), 0.1f), std::log(8.0), 1e-6);
}

TEST(CrossEntropyBackward, MatchesFiniteDifferencesAndAccumulates) {
  for (float smoothing : {0.0f, 0.1f}) {
    for (float scale : {1.0f, 2.5f}) {
      const int64_t b = 3, c = 10;
      Tensor logits = random_tensor(Shape{b, c}, 3, 2.0);
      auto t = targets_for(b, c, 4);
      Tensor num = numeric_grad(
          logits, [&] { return scale * ref::cross_entropy(logits, t.data(), smoothing); });
      Tensor probs = Tensor::empty(Shape{b, c});
      cross_entropy_forward(probs, logits, t.data(), smoothing);
      Tensor d = Tensor::full(Shape{b, c}, 0.25f);
      cross_entropy_backward(d, probs, t.data(), smoothing, scale);
      for (int64_t i = 0; i < d.numel(); ++i) d.at(i) -= 0.25f;
      EXPECT_LT(max_rel_error(d, num), 1e-5) << "smoothing " << smoothing << " scale " << scale;
    }
  }
}

// The baseline (SSE) kernels, which AVX2 machines never pick by themselves.
TEST(CrossEntropy, BaselineKernelsMatchReference) {
  cpu::avx2_allowed() = false;
  Tensor logits = random_tensor(Shape{5, 1000}, 7, 4.0);
  auto t = targets_for(5, 1000, 8);
  Tensor probs = Tensor::empty(logits.shape());
  const float loss = cross_entropy_forward(probs, logits, t.data(), 0.1f);
  cpu::avx2_allowed() = true;
  const double want = ref::cross_entropy(logits, t.data(), 0.1f);
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want));
  EXPECT_LT(max_rel_error(probs, ref::softmax(logits)), 1e-5);
}

TEST(CrossEntropy, Errors) {
  Tensor logits = Tensor::zeros(Shape{2, 5});
  Tensor probs = Tensor::zeros(Shape{2, 6});
  std::vector<int32_t> t = {1, 2};
  try {
    cross_entropy_forward(probs, logits, t.data(), 0.0f);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cross_entropy_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 5]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 6]"), std::string::npos) << msg;
  }
  Tensor p5 = Tensor::zeros(Shape{2, 5});
  std::vector<int32_t> bad = {1, 5};
  EXPECT_THROW(cross_entropy_forward(p5, logits, bad.data(), 0.0f), std::invalid_argument);
  EXPECT_THROW(cross_entropy_forward(p5, logits, t.data(), 1.5f), std::invalid_argument);
  Tensor d = Tensor::zeros(Shape{2, 6});
  EXPECT_THROW(cross_entropy_backward(d, p5, t.data(), 0.0f), ShapeError);
}

}  // namespace
}  // namespace vitpe
