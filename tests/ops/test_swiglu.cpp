// swiglu_forward / swiglu_backward (ops/cpu/gelu.cpp), EVA-02's gated MLP activation: against
// the double reference, finite differences for the input, shape errors.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

TEST(Swiglu, ForwardMatchesReference) {
  for (const Shape& s : {Shape{2, 5, 2048}, Shape{3, 14}, Shape{1, 1, 2}}) {
    const Tensor x = random_tensor(s, 1, 3.0);
    std::vector<int64_t> half = s.vec();
    half.back() /= 2;
    Tensor y = Tensor::full(Shape(half), 1e9f);
    swiglu_forward(y, x);
    EXPECT_LT(max_rel_error(y, ref::swiglu(x)), 1e-5) << s.str();
  }
}

TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({2, 3, 10}, 2, 2.0);
  const Tensor w = random_tensor({2, 3, 5}, 3);
  Tensor dx = Tensor::full(x.shape(), 1e9f);  // overwritten
  swiglu_backward(dx, w, x);
  EXPECT_LT(max_rel_error(dx, numeric_grad(x, [&] { return weighted_sum(ref::swiglu(x), w); })),
            1e-3);
}

TEST(Swiglu, ShapeErrorsSayWhatWasExpected) {
  const Tensor x = random_tensor({2, 7}, 1);
  Tensor y = Tensor::empty({2, 3});
  const std::string m = testing::message_of([&] { swiglu_forward(y, x); });
  EXPECT_NE(m.find("expected x [..., 2H] and y [..., H], found [2, 7] and [2, 3]"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace vitpe
