// The pure table builders (encodings/tables.h) on their own: sincos2d against timm's and MAE's
// goldens, sincos1d against its closed form at chosen entries, ALiBi's slopes as a geometric
// series ending at 2^-8, RoPE axial angles recovered from (cos, sin), and the dimension errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <utility>
#include <vector>

#include "encodings/tables.h"
#include "golden.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

// The grid-scaled base: the slowest of n frequencies base^(-k/n) turns a quarter across the
// longer side, the fastest one radian per cell; one frequency or one cell: 1. And the option
// value "grid" builds the same table as that number.
TEST(Tables, GridScaledBaseSpreadsTheLadderOverTheGrid) {
  for (const auto& [n, side] : std::vector<std::pair<int64_t, int64_t>>{{4, 7}, {16, 7}, {8, 14}}) {
    const double base = grid_scaled_base(n, side);
    const double slowest = std::pow(base, -static_cast<double>(n - 1) / static_cast<double>(n));
    EXPECT_NEAR(slowest * static_cast<double>(side - 1), std::acos(0.0), 1e-9) << n << " " << side;
  }
  EXPECT_NEAR(grid_scaled_base(4, 7), std::pow(12 / 3.141592653589793, 4.0 / 3), 1e-12);
  EXPECT_EQ(grid_scaled_base(1, 7), 1.0);
  EXPECT_EQ(grid_scaled_base(4, 1), 1.0);
  Rng rng(0);
  const Grid g{7, 5};
  const double t = grid_scaled_base(16 / 4, 7);
  auto scaled = make_token_encoding(parse_encoding("sincos2d:T=grid"), 16, g, 1, rng);
  char spec[64];
  std::snprintf(spec, sizeof spec, "sincos2d:T=%.17g", t);
  auto fixed = make_token_encoding(parse_encoding(spec), 16, g, 1, rng);
  EXPECT_EQ(testing::max_rel_error(scaled->table(g), fixed->table(g)), 0.0);
  auto rope = make_attention_encoding(parse_encoding("rope-axial:theta=grid"), 2, 16, g, 0, rng);
  const Tensor f = rope->terms({g, 0}).rotation_freqs;  // pair k < 4: x * theta^(-k/4)
  EXPECT_NEAR(f.at(3 * 2), std::pow(grid_scaled_base(4, 7), -0.75), 1e-6);
  try {
    parse_encoding("sincos2d:T=wide");
    FAIL() << "accepted T=wide";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("T=<number > 0|grid>"), std::string::npos) << e.what();
  }
}

TEST(Tables, Sincos2dMatchesTimmAndMaeGoldens) {
  Tensor timm = sincos2d_table({5, 7}, 16, 0, 10000.0, Sincos2dLayout::timm);
  EXPECT_LT(testing::max_rel_error(timm, testing::golden("sincos2d_timm")), 1e-6);
  Tensor mae = sincos2d_table({5, 7}, 16, 1, 10000.0, Sincos2dLayout::mae);
  EXPECT_LT(testing::max_rel_error(mae, testing::golden("sincos2d_mae")), 1e-6);
  for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(mae.at(c), 0.0f) << "prefix row, channel " << c;
}

TEST(Tables, Sincos1dClosedForm) {
  const int64_t D = 6;
  Tensor t = sincos1d_table(10, D, 2, 100.0);
  ASSERT_EQ(t.shape(), Shape({12, D}));
  for (int64_t c = 0; c < 2 * D; ++c) EXPECT_EQ(t.at(c), 0.0f);
  for (int64_t n : {0, 3, 9}) {
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = n * std::pow(100.0, -2.0 * i / D);
      EXPECT_NEAR(t.at((2 + n) * D + 2 * i), std::sin(a), 1e-6) << n << " " << i;
      EXPECT_NEAR(t.at((2 + n) * D + 2 * i + 1), std::cos(a), 1e-6) << n << " " << i;
    }
  }
}

TEST(Tables, AlibiSlopesAreGeometricDownTo2PowMinus8) {
  for (int64_t H : {1, 3, 8}) {
    std::vector<double> s = alibi2d_slopes(H);
    ASSERT_EQ(static_cast<int64_t>(s.size()), H);
    EXPECT_DOUBLE_EQ(s.back(), 1.0 / 256);
    for (int64_t h = 1; h < H; ++h) EXPECT_NEAR(s[h] / s[h - 1], std::pow(2.0, -8.0 / H), 1e-12);
  }
}

TEST(Tables, AlibiGridSlopesSpanOneLogitAcrossTheDiagonal) {
  // 7x7: diagonal 6 sqrt(2); four heads from 2^-2 down to 1/(6 sqrt(2)), a geometric ladder.
  std::vector<double> s = alibi2d_grid_slopes(4, {7, 7});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_DOUBLE_EQ(s[0], 0.25);
  EXPECT_NEAR(s[3] * std::hypot(6.0, 6.0), 1.0, 1e-12);
  for (int h = 1; h < 4; ++h) EXPECT_NEAR(s[h] / s[h - 1], s[1] / s[0], 1e-12);
  // One head, a 1x1 window, a window too small for a ladder.
  EXPECT_NEAR(alibi2d_grid_slopes(1, {3, 5})[0], 1 / std::hypot(2.0, 4.0), 1e-12);
  EXPECT_EQ(alibi2d_grid_slopes(2, {1, 1}), (std::vector<double>{1.0, 1.0}));
  for (double v : alibi2d_grid_slopes(8, {2, 2})) EXPECT_NEAR(v, 1 / std::sqrt(2.0), 1e-12);
  EXPECT_NE(testing::message_of([] { alibi2d_grid_slopes(0, {7, 7}); }).find("got 0"), std::string::npos);
}

TEST(Tables, RopeAxialAnglesAreCoordinateTimesFrequency) {
  const int64_t hd = 8, half = 4, quarter = 2;
  Tensor c, s;
  rope_axial_tables(c, s, {3, 5}, hd, RopeAxialLayout{});
  ASSERT_EQ(c.shape(), Shape({1, 15, half}));
  for (int64_t n = 0; n < 15; ++n) {
    const double y = n / 5, x = n % 5;
    for (int64_t p = 0; p < half; ++p) {
      const double w = std::pow(100.0, -4.0 * (p % quarter) / hd);
      const double want = (p < quarter ? x : y) * w;
      const float cs = c.at(n * half + p), sn = s.at(n * half + p);
      EXPECT_NEAR(cs * cs + sn * sn, 1.0, 1e-6);
      EXPECT_NEAR(std::cos(want), cs, 1e-6) << n << " " << p;
      EXPECT_NEAR(std::sin(want), sn, 1e-6) << n << " " << p;
    }
  }
}

TEST(Tables, RopeAxialLayoutSwapsAxesAndScalesCoordinates) {
  // timm's 'ij' indexing (y turns the first half of the pairs) with ref_feat_shape-style scales;
  // the frequencies fold the scales in and give the same angles.
  const int64_t hd = 8, half = 4, quarter = 2;
  const RopeAxialLayout layout{10000.0, false, 0.75, 2.5};
  Tensor c, s;
  rope_axial_tables(c, s, {3, 4}, hd, layout);
  Tensor f = rope_axial_freqs(2, hd, layout);
  ASSERT_EQ(f.shape(), Shape({2, half, 2}));
  for (int64_t n = 0; n < 12; ++n) {
    const double y = n / 4, x = n % 4;
    for (int64_t p = 0; p < half; ++p) {
      const double w = std::pow(10000.0, -4.0 * (p % quarter) / hd);
      const double want = (p < quarter ? y * 2.5 : x * 0.75) * w;
      EXPECT_NEAR(std::atan2(s.at(n * half + p), c.at(n * half + p)),
                  std::remainder(want, 2 * std::numbers::pi), 1e-5)
          << n << " " << p;
      const double from_freqs = x * f.at((half + p) * 2) + y * f.at((half + p) * 2 + 1);
      EXPECT_NEAR(from_freqs, want, 1e-5) << n << " " << p;
    }
  }
}

TEST(Tables, BadDimensionsSayWhat) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  };
  EXPECT_NE(message([] {
              sincos2d_table({2, 2}, 6, 0, 1e4, Sincos2dLayout::mae);
            }).find("got 6"),
            std::string::npos);
  EXPECT_NE(message([] { sincos1d_table(4, 5, 0, 1e4); }).find("got 5"), std::string::npos);
  EXPECT_NE(message([] { alibi2d_slopes(0); }).find("got 0"), std::string::npos);
  Tensor c, s;
  EXPECT_NE(message([&] {
              rope_axial_tables(c, s, {2, 2}, 6, RopeAxialLayout{});
            }).find("got 6"),
            std::string::npos);
}

}  // namespace
}  // namespace vitpe
