// ops/resample: PyTorch F.interpolate goldens (bilinear/bicubic, with and without antialias),
// identity at the same size, weights summing to one, and the backward being the exact adjoint.
#include "golden.h"
#include "ops/resample.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::golden;
using testing::golden_meta;

TEST(Resample, MatchesTorchInterpolate) {
  for (int i = 0; i < 8; ++i) {
    const std::string n = "resample_" + std::to_string(i);
    Tensor x = golden(n + "_in"), want = golden(n + "_out");
    const auto& m = golden_meta(n + "_in");
    Filter f = m.at("mode") == "bicubic" ? Filter::bicubic : Filter::bilinear;
    Tensor y = resample(x, m.at("out")[0], m.at("out")[1], f, m.at("antialias").get<bool>());
    ASSERT_EQ(y.shape(), want.shape()) << n;
    EXPECT_LT(testing::max_rel_error(y, want), 2e-6) << n << " " << m.dump();
  }
}

TEST(Resample, SameSizeIsIdentity) {
  Tensor x = testing::random_tensor({2, 5, 7}, 1);
  for (Filter f : {Filter::bilinear, Filter::bicubic})
    for (bool aa : {false, true}) {
      Tensor y = resample(x, 5, 7, f, aa);
      EXPECT_EQ(testing::max_rel_error(y, x), 0.0);
    }
  // One axis unchanged: that axis passes through exactly (weights 1 and 0).
  Tensor y = resample(x, 9, 7, Filter::bicubic, true);
  Tensor back_rows = resample(x, 5, 7, Filter::bicubic, true);
  EXPECT_EQ(testing::max_rel_error(back_rows, x), 0.0);
  EXPECT_EQ(y.size(1), 9);
}

TEST(Resample, WeightsSumToOne) {
  for (Filter f : {Filter::bilinear, Filter::bicubic})
    for (bool aa : {false, true})
      for (auto [in, out] : {std::pair{7, 12}, {12, 7}, {13, 4}, {3, 17}}) {
        ResampleTaps t = resample_taps(in, out, f, aa);
        for (int64_t i = 0; i < out; ++i) {
          double s = 0;
          for (int64_t k = 0; k < t.count[i]; ++k) s += t.weight[i * t.max_taps + k];
          EXPECT_NEAR(s, 1.0, 1e-6) << in << "->" << out;
          EXPECT_GE(t.start[i], 0);
          EXPECT_LE(t.start[i] + t.count[i], in);
        }
      }
}

// <R x, y> == <x, R^T y> for random x, y: the backward is the transpose of the forward.
TEST(Resample, BackwardIsAdjoint) {
  for (Filter f : {Filter::bilinear, Filter::bicubic})
    for (bool aa : {false, true}) {
      Tensor x = testing::random_tensor({3, 6, 9}, 2), y = testing::random_tensor({3, 11, 4}, 3);
      Tensor rx = resample(x, 11, 4, f, aa);
      Tensor rty = resample_backward(y, 6, 9, f, aa);
      double a = testing::weighted_sum(rx, y), b = testing::weighted_sum(x, rty);
      EXPECT_NEAR(a, b, 1e-4 * (std::fabs(a) + 1));
    }
}

TEST(Resample, RejectsBadShapes) {
  EXPECT_THROW(resample(Tensor::zeros({2, 2, 2, 2}), 3, 3, Filter::bicubic, true), ShapeError);
  EXPECT_THROW(resample(Tensor::zeros({2, 2}), 0, 3, Filter::bicubic, true), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
