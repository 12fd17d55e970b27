// layer_scale_add_forward / layer_scale_add_backward (ops/cpu/gelu.cpp): against the double
// reference (ops/reference/elementwise.cpp), finite differences for both gradients, thread-count
// independence of the gamma gradient, in-place use and shape errors.
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

TEST(LayerScaleAdd, ForwardMatchesReferenceAndMayRunInPlace) {
  // Sizes below and above one parallel chunk, a width that is not a multiple of the SIMD width.
  for (const Shape& s : {Shape{2, 197, 384}, Shape{3, 5, 7}, Shape{1, 1, 64}, Shape{50, 1000}}) {
    const Tensor x = random_tensor(s, 1), a = random_tensor(s, 2);
    const Tensor gamma = random_tensor({s.dim(-1)}, 3, 0.1);
    Tensor y = Tensor::full(s, 1e9f);
    layer_scale_add_forward(y, x, gamma, a);
    EXPECT_LT(max_rel_error(y, ref::layer_scale_add(x, gamma, a)), 1e-6) << s.str();
    Tensor inplace = x.clone();
    layer_scale_add_forward(inplace, inplace, gamma, a);
    EXPECT_EQ(max_rel_error(inplace, y), 0.0) << s.str();
  }
}

TEST(LayerScaleAdd, BackwardMatchesFiniteDifferences) {
  const Shape s{2, 3, 5};
  Tensor x = random_tensor(s, 4), a = random_tensor(s, 5), gamma = random_tensor({5}, 6);
  const Tensor w = random_tensor(s, 7);  // loss = sum(w * y): dy = w
  auto loss = [&] { return weighted_sum(ref::layer_scale_add(x, gamma, a), w); };
  Tensor da = Tensor::full(s, 1e9f);         // overwritten
  Tensor dgamma = Tensor::full({5}, 0.25f);  // accumulated into
  layer_scale_add_backward(da, dgamma, w, gamma, a);
  EXPECT_LT(max_rel_error(da, numeric_grad(a, loss)), 1e-3);
  Tensor want_dgamma = numeric_grad(gamma, loss);
  for (int64_t i = 0; i < 5; ++i) want_dgamma.at(i) += 0.25f;
  EXPECT_LT(max_rel_error(dgamma, want_dgamma), 1e-3);
  // Without da (a caller that needs only the gamma gradient).
  Tensor no_da;
  Tensor dgamma2 = Tensor::full({5}, 0.25f);
  layer_scale_add_backward(no_da, dgamma2, w, gamma, a);
  EXPECT_EQ(max_rel_error(dgamma2, dgamma), 0.0);
}

TEST(LayerScaleAdd, GammaGradientDoesNotDependOnTheThreadCount) {
  const Shape s{4, 197, 384};
  const Tensor dy = random_tensor(s, 8), a = random_tensor(s, 9), gamma = random_tensor({384}, 10);
  const int saved = num_threads();
  Tensor no_da, g1 = Tensor::zeros({384}), g2 = Tensor::zeros({384});
  set_num_threads(1);
  layer_scale_add_backward(no_da, g1, dy, gamma, a);
  set_num_threads(2);
  layer_scale_add_backward(no_da, g2, dy, gamma, a);
  set_num_threads(saved);
  EXPECT_EQ(max_rel_error(g1, g2), 0.0);
}

TEST(LayerScaleAdd, ShapeErrorsSayWhatWasExpected) {
  const Tensor x = random_tensor({2, 4, 8}, 1), a = random_tensor({2, 4, 8}, 2);
  Tensor y = Tensor::empty({2, 4, 8});
  const std::string m =
      testing::message_of([&] { layer_scale_add_forward(y, x, Tensor::empty({4}), a); });
  EXPECT_NE(m.find("layer_scale_add_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("expected gamma of shape [8]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  const std::string m2 = testing::message_of([&] {
    layer_scale_add_forward(y, x, Tensor::empty({8}), Tensor::empty({2, 4, 9}));
  });
  EXPECT_NE(m2.find("[2, 4, 9]"), std::string::npos) << m2;
}

}  // namespace
}  // namespace vitpe
