// sincos1d: Vaswani's formula (naive double reference), values in [-1, 1] up to position 1e5,
// the shift property PE(p + k) = R_k PE(p) with R_k block-diagonal and independent of p, prefix
// rows zero, and the D-even error.
#include <cmath>

#include "encodings/encoding.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

Tensor sincos1d_part_table(Grid g, int64_t dim, int64_t prefix = 0,
                           const std::string& spec = "sincos1d") {
  Rng rng(0);
  return make_token_encoding(parse_encoding(spec), dim, g, prefix, rng)->table(g);
}

TEST(Sincos1d, MatchesFormulaAndPrefixIsZero) {
  Tensor t = sincos1d_part_table({3, 5}, 8, 2, "sincos1d:T=100");
  for (int64_t i = 0; i < 2 * 8; ++i) EXPECT_EQ(t.at(i), 0.f);
  for (int64_t p = 0; p < 15; ++p)
    for (int64_t i = 0; i < 4; ++i) {
      double a = p / std::pow(100.0, 2.0 * i / 8);
      EXPECT_NEAR(t.at((2 + p) * 8 + 2 * i), std::sin(a), 1e-6);
      EXPECT_NEAR(t.at((2 + p) * 8 + 2 * i + 1), std::cos(a), 1e-6);
    }
}

TEST(Sincos1d, RangeAndShiftRotationUpTo1e5) {
  const int64_t D = 16, N = 100001;
  Tensor t = sincos1d_part_table({1, N}, D);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::fabs(t.at(i)), 1.0f);
  for (int64_t k : {1, 7, 1000}) {
    double worst = 0;
    for (int64_t p : {0L, 3L, 4567L, 99000L}) {
      for (int64_t i = 0; i < D / 2; ++i) {
        // R_k for pair i: [[cos b, sin b], [-sin b, cos b]] with b = k w_i, acting on (sin, cos).
        double b = k * std::pow(10000.0, -2.0 * i / D);
        double s = t.at(p * D + 2 * i), c = t.at(p * D + 2 * i + 1);
        double s2 = s * std::cos(b) + c * std::sin(b), c2 = c * std::cos(b) - s * std::sin(b);
        worst = std::max({worst, std::fabs(s2 - t.at((p + k) * D + 2 * i)),
                          std::fabs(c2 - t.at((p + k) * D + 2 * i + 1))});
      }
    }
    EXPECT_LT(worst, 1e-5) << "k=" << k;
  }
}

TEST(Sincos1d, NoParamsAndOddDimFails) {
  Rng rng(0);
  auto e = make_token_encoding(parse_encoding("sincos1d"), 8, {2, 2}, 1, rng);
  EXPECT_TRUE(e->params().empty());
  e->resample({3, 3});
  EXPECT_EQ(e->grid(), Grid({3, 3}));
  EXPECT_THROW(make_token_encoding(parse_encoding("sincos1d"), 7, {2, 2}, 1, rng),
               std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
