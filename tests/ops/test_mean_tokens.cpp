// mean_tokens_forward / mean_tokens_backward (ops/cpu/mean_tokens.cpp) against the double
// reference (ops/reference/mean_tokens.cpp) and central finite differences.
#include <gtest/gtest.h>

#include <string>

#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;

TEST(MeanTokensForward, MatchesReference) {
  for (int64_t start : {0, 1}) {
    for (const Shape& s : {Shape{3, 197, 384}, Shape{1, 49, 768}, Shape{2, 5, 130}}) {
      Tensor x = random_tensor(s, 1);
      Tensor y = Tensor::full(Shape{s[0], s[2]}, 1e9f);
      mean_tokens_forward(y, x, start);
      EXPECT_LT(max_rel_error(y, ref::mean_tokens(x, start)), 1e-5)
          << s.str() << " start " << start;
    }
  }
}

TEST(MeanTokensBackward, MatchesFiniteDifferencesAndAccumulates) {
  for (int64_t start : {0, 2}) {
    Tensor x = random_tensor(Shape{2, 5, 3}, 2);
    Tensor w = random_tensor(Shape{2, 3}, 3);
    Tensor num = numeric_grad(x, [&] {  // sum_b,d w[b,d] * mean_t x[b,t,d], in double
      double s = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = start; t < 5; ++t)
          for (int64_t d = 0; d < 3; ++d)
            s += static_cast<double>(x.at((b * 5 + t) * 3 + d)) * w.at(b * 3 + d) / (5 - start);
      return s;
    });
    Tensor dx = Tensor::full(x.shape(), 1.0f);
    mean_tokens_backward(dx, w, start);
    for (int64_t i = 0; i < dx.numel(); ++i) dx.at(i) -= 1.0f;
    EXPECT_LT(max_rel_error(dx, num), 1e-5) << "start " << start;
    // Prefix tokens get exactly no gradient.
    for (int64_t t = 0; t < start; ++t) EXPECT_EQ(dx.at(t * 3), 0.0f);
  }
}

TEST(MeanTokens, Errors) {
  Tensor x = Tensor::zeros(Shape{2, 5, 3});
  Tensor y = Tensor::zeros(Shape{2, 4});
  try {
    mean_tokens_forward(y, x, 0);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mean_tokens_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 4]"), std::string::npos) << msg;
  }
  Tensor y3 = Tensor::zeros(Shape{2, 3});
  EXPECT_THROW(mean_tokens_forward(y3, x, 5), ShapeError);  // no token left
  Tensor dx = Tensor::zeros(Shape{2, 5, 3});
  EXPECT_THROW(mean_tokens_backward(dx, y, 0), ShapeError);
}

}  // namespace
}  // namespace vitpe
