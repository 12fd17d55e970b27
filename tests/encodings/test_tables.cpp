// The pure table builders (encodings/tables.h) on their own: sincos2d against timm's and MAE's
// goldens, sincos1d against its closed form at chosen entries, ALiBi's slopes as a geometric
// series ending at 2^-8, RoPE axial angles recovered from (cos, sin), and the dimension errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "encodings/tables.h"
#include "golden.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

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
