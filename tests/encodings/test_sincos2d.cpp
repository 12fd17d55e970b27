// sincos2d: timm's build_sincos2d_pos_embed and MAE's get_2d_sincos_pos_embed goldens (non-square),
// values in [-1, 1] up to 1e5 on each axis, the per-axis shift property PE(y, x + k) = R_k PE(y, x)
// (and the same along y) with R_k independent of the position, and the D % 4 error.
#include <cmath>

#include "encodings/encoding.h"
#include "golden.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

Tensor sincos2d_part_table(Grid g, int64_t dim, int64_t prefix, const std::string& spec) {
  Rng rng(0);
  return make_token_encoding(parse_encoding(spec), dim, g, prefix, rng)->table(g);
}

TEST(Sincos2d, MatchesTimmAndMae) {
  Tensor timm = sincos2d_part_table({5, 7}, 16, 0, "sincos2d:layout=timm");
  EXPECT_LT(testing::max_rel_error(timm, testing::golden("sincos2d_timm")), 1e-6);
  Tensor mae = sincos2d_part_table({5, 7}, 16, 1, "sincos2d");  // layout=mae is the default
  EXPECT_LT(testing::max_rel_error(mae, testing::golden("sincos2d_mae")), 1e-6);
}

// For the mae layout, channel blocks [sin x | cos x | sin y | cos y] of width P = D/4.
void check_axis_shift(bool along_x) {
  const int64_t D = 8, P = 2, N = 100001;
  Grid g = along_x ? Grid{1, N} : Grid{N, 1};
  Tensor t = sincos2d_part_table(g, D, 0, "sincos2d");
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::fabs(t.at(i)), 1.0f);
  const int64_t s0 = along_x ? 0 : 2 * P, c0 = s0 + P;
  const int64_t other_s = along_x ? 2 * P : 0, other_c = other_s + P;
  for (int64_t k : {1, 13, 2000}) {
    double worst = 0;
    for (int64_t p : {0L, 5L, 77777L, 98000L}) {
      for (int64_t j = 0; j < P; ++j) {
        double b = k * std::pow(10000.0, -static_cast<double>(j) / P);
        double s = t.at(p * D + s0 + j), c = t.at(p * D + c0 + j);
        worst = std::max(
            {worst, std::fabs(s * std::cos(b) + c * std::sin(b) - t.at((p + k) * D + s0 + j)),
             std::fabs(c * std::cos(b) - s * std::sin(b) - t.at((p + k) * D + c0 + j))});
        // The other axis does not move: sin 0 = 0, cos 0 = 1.
        EXPECT_EQ(t.at((p + k) * D + other_s + j), 0.f);
        EXPECT_EQ(t.at((p + k) * D + other_c + j), 1.f);
      }
    }
    EXPECT_LT(worst, 1e-5) << (along_x ? "x" : "y") << " k=" << k;
  }
}

TEST(Sincos2d, RangeAndShiftRotationPerAxis) {
  check_axis_shift(true);
  check_axis_shift(false);
}

TEST(Sincos2d, DimMustBeDivisibleBy4) {
  Rng rng(0);
  try {
    make_token_encoding(parse_encoding("sincos2d"), 18, {2, 2}, 1, rng);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("18"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vitpe
