// ops/resample: PyTorch F.interpolate goldens (bilinear/bicubic, with and without antialias),
// identity at the same size, weights summing to one, and the backward being the exact adjoint;
// BEiT's geometric resize against a naive interpolation on unilm's offsets, identity only when
// both axes stay, and its adjoint.
#include <cmath>
#include <vector>

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

// The resize matrix B of an h x w patch to oh x ow, written out from resample (bilinear, no
// antialias), column j the resize of the patch with a 1 at pixel j: B[i * n + j].
std::vector<double> resize_matrix(int64_t h, int64_t w, int64_t oh, int64_t ow) {
  const int64_t n = h * w, m = oh * ow;
  std::vector<double> b(static_cast<size_t>(m * n));
  for (int64_t j = 0; j < n; ++j) {
    Tensor e = Tensor::zeros({h, w});
    e.f32()[j] = 1;
    const Tensor r = resample(e, oh, ow, Filter::bilinear, false);
    for (int64_t i = 0; i < m; ++i) b[i * n + j] = r.f32()[i];
  }
  return b;
}

// PI-resize: growing, every patch and its bilinear resize give the same token with the old and
// the new kernel; shrinking, the new kernel solves the least-squares equations B (B^T w' - w) = 0;
// the same size is the identity; and non-square kernels work.
TEST(PiResize, TokensOfResizedPatchesAreKeptAndShrinkingIsLeastSquares) {
  const Tensor w = testing::random_tensor({3, 2, 4, 4}, 1);
  const Tensor up = pi_resize_kernel(w, 8, 8);
  ASSERT_EQ(up.shape(), Shape({3, 2, 8, 8}));
  for (uint64_t seed = 2; seed < 6; ++seed) {
    const Tensor x = testing::random_tensor({2, 4, 4}, seed);  // one patch, two channels
    const Tensor xr = resample(x, 8, 8, Filter::bilinear, false);
    for (int64_t d = 0; d < 3; ++d) {
      double old_token = 0, new_token = 0;
      for (int64_t i = 0; i < 32; ++i) old_token += double(w.f32()[d * 32 + i]) * x.f32()[i];
      for (int64_t i = 0; i < 128; ++i) new_token += double(up.f32()[d * 128 + i]) * xr.f32()[i];
      EXPECT_NEAR(new_token, old_token, 1e-4 * (1 + std::fabs(old_token))) << seed << " " << d;
    }
  }
  // Shrinking 8x6 kernels to 4x3: the normal equations of min ||B^T w' - w||.
  const Tensor big = testing::random_tensor({2, 8, 6}, 7);
  const Tensor small = pi_resize_kernel(big, 4, 3);
  ASSERT_EQ(small.shape(), Shape({2, 4, 3}));
  const std::vector<double> b = resize_matrix(8, 6, 4, 3);
  const int64_t n = 48, m = 12;
  double worst = 0, scale = 0;
  for (int64_t q = 0; q < 2; ++q) {
    std::vector<double> resid(n);
    for (int64_t j = 0; j < n; ++j) {
      double v = -big.f32()[q * n + j];
      for (int64_t i = 0; i < m; ++i) v += b[i * n + j] * small.f32()[q * m + i];
      resid[j] = v;
      scale = std::max(scale, std::fabs(static_cast<double>(big.f32()[q * n + j])));
    }
    for (int64_t i = 0; i < m; ++i) {
      double g = 0;
      for (int64_t j = 0; j < n; ++j) g += b[i * n + j] * resid[j];
      worst = std::max(worst, std::fabs(g));
    }
  }
  EXPECT_LT(worst, 1e-5 * scale);
  EXPECT_EQ(testing::max_rel_error(pi_resize_kernel(w, 4, 4), w), 0.0);
  // Growing a non-square kernel keeps tokens too.
  const Tensor r = testing::random_tensor({1, 2, 3}, 9), rr = pi_resize_kernel(r, 4, 9);
  const Tensor x = testing::random_tensor({2, 3}, 10), xr = resample(x, 4, 9, Filter::bilinear, false);
  double a = 0, c = 0;
  for (int64_t i = 0; i < 6; ++i) a += double(r.f32()[i]) * x.f32()[i];
  for (int64_t i = 0; i < 36; ++i) c += double(rr.f32()[i]) * xr.f32()[i];
  EXPECT_NEAR(c, a, 1e-4 * (1 + std::fabs(a)));
  EXPECT_THROW(pi_resize_kernel(testing::random_tensor({4}, 1), 2, 2), ShapeError);
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

// BEiT's geometric resize (timm's resize_rel_pos_bias_table; its golden is in test_relbias.cpp,
// through the encoding): the source offsets are those of unilm's formula, written out here as a
// naive 1-D interpolation on them, with the border held beyond the outermost offset.
TEST(ResampleBeit, TapsMatchNaiveInterpolationOnGeometricOffsets) {
  for (auto [src, dst] : {std::pair{7, 11}, {7, 13}, {13, 9}, {7, 7}, {1, 5}, {5, 1}}) {
    // unilm: q by bisection so that 1 + q + ... + q^(n-1) just exceeds dst // 2
    const int n = src / 2;
    double lo = 1.01, hi = 1.5, q = 0;
    while (hi - lo > 1e-6) {
      q = (lo + hi) / 2;
      double gp = 0;
      for (int i = 0; i < n; ++i) gp += std::pow(q, i);
      (gp > dst / 2 ? hi : lo) = q;
    }
    std::vector<double> p(src, 0.0);
    for (int k = 1; k <= n; ++k) {
      double d = 0;
      for (int i = 0; i < k; ++i) d += std::pow(q, i);
      p[n + k] = d;
      p[n - k] = -d;
    }
    ResampleTaps t = beit_resample_taps(src, dst);
    ASSERT_EQ(t.out_size, dst);
    for (int i = 0; i < dst; ++i) {
      const double x = i - dst / 2;
      std::vector<double> want(src, 0.0);
      if (x <= p.front()) {
        want.front() = 1;
      } else if (x >= p.back()) {
        want.back() = 1;
      } else {
        int r = 0;
        while (p[r] < x) ++r;
        want[r - 1] = (p[r] - x) / (p[r] - p[r - 1]);
        want[r] = (x - p[r - 1]) / (p[r] - p[r - 1]);
      }
      std::vector<double> got(src, 0.0);
      for (int64_t k = 0; k < t.count[i]; ++k) got[t.start[i] + k] += t.weight[i * t.max_taps + k];
      for (int j = 0; j < src; ++j)
        EXPECT_NEAR(got[j], want[j], 1e-6) << src << "->" << dst << " out " << i << " tap " << j;
    }
  }
}

TEST(ResampleBeit, SameSizeIsIdentityButNotPerAxis) {
  Tensor x = testing::random_tensor({2, 5, 7}, 1);
  EXPECT_EQ(testing::max_rel_error(resample_beit(x, 5, 7), x), 0.0);
  EXPECT_EQ(testing::max_rel_error(resample_beit_backward(x, 5, 7), x), 0.0);
  // As timm: once one axis changes, the other is resampled too (q ~ 1.01 spreads its offsets).
  Tensor y = resample_beit(x, 9, 7);
  Tensor z = resample_beit(x, 5, 9);
  ASSERT_EQ(y.shape(), Shape({2, 9, 7}));
  ASSERT_EQ(z.shape(), Shape({2, 5, 9}));
  double diff = 0;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t j = 0; j < 7; ++j)  // row 4 of y is offset 0, as row 2 of x
      diff =
          std::max(diff, std::fabs(double(y.at((c * 9 + 4) * 7 + j)) - x.at((c * 5 + 2) * 7 + j)));
  EXPECT_GT(diff, 1e-4);
}

// <R a, b> == <a, R^T b> for random a, b: the backward is the transpose of the forward.
TEST(ResampleBeit, BackwardIsAdjoint) {
  for (auto [in, out] : {std::pair{std::pair{7, 7}, std::pair{11, 7}},
                         {{7, 7}, {13, 13}},
                         {{13, 13}, {9, 9}},
                         {{5, 9}, {11, 3}}}) {
    Tensor a = testing::random_tensor({3, in.first, in.second}, 2);
    Tensor b = testing::random_tensor({3, out.first, out.second}, 3);
    Tensor ra = resample_beit(a, out.first, out.second);
    Tensor rtb = resample_beit_backward(b, in.first, in.second);
    ASSERT_EQ(rtb.shape(), a.shape());
    double lhs = testing::weighted_sum(ra, b), rhs = testing::weighted_sum(a, rtb);
    EXPECT_NEAR(lhs, rhs, 1e-5 * (std::fabs(lhs) + 1));
  }
}

TEST(ResampleBeit, RejectsEvenSizes) {
  const std::string m = testing::message_of([] { resample_beit(Tensor::zeros({2, 7, 7}), 8, 7); });
  EXPECT_NE(m.find("odd"), std::string::npos) << m;
  EXPECT_NE(m.find("7 -> 8"), std::string::npos) << m;
  EXPECT_THROW(resample_beit_backward(Tensor::zeros({6, 7}), 7, 7), std::invalid_argument);
  EXPECT_THROW(resample_beit(Tensor::zeros({2, 2, 2, 2}), 3, 3), ShapeError);
}

TEST(Resample, RejectsBadShapes) {
  EXPECT_THROW(resample(Tensor::zeros({2, 2, 2, 2}), 3, 3, Filter::bicubic, true), ShapeError);
  EXPECT_THROW(resample(Tensor::zeros({2, 2}), 0, 3, Filter::bicubic, true), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
