// alibi2d: symmetric, zero diagonal, strictly decreasing with Euclidean distance, the published
// slopes, prefix pairs zero, any window size.
#include <cmath>

#include "encodings/encoding.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

TEST(Alibi2d, SymmetricZeroDiagonalDecreasingWithDistance) {
  Rng rng(0);
  const int64_t H = 4, P = 1;
  auto e = make_attention_encoding(parse_encoding("alibi2d"), H, 8, {3, 5}, P, rng);
  EXPECT_TRUE(e->has_bias());
  EXPECT_FALSE(e->has_rotation());
  EXPECT_TRUE(e->params().empty());
  for (Grid w : {Grid{3, 5}, Grid{6, 4}}) {  // the built window and a larger one
    const int64_t N = P + w.count();
    Tensor b = Tensor::empty({H, N, N});
    e->bias(b, {w, P});
    for (int64_t h = 0; h < H; ++h) {
      const double slope = std::pow(2.0, -8.0 * (h + 1) / H);
      std::vector<std::pair<double, float>> by_distance;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) {
          float v = b.at((h * N + i) * N + j);
          EXPECT_EQ(v, b.at((h * N + j) * N + i));
          if (i < P || j < P) {
            EXPECT_EQ(v, 0.f);
            continue;
          }
          if (i == j) {
            EXPECT_EQ(v, 0.f);
          }
          int64_t a = i - P, c = j - P;
          double d = std::hypot(double(a / w.cols - c / w.cols), double(a % w.cols - c % w.cols));
          EXPECT_NEAR(v, -slope * d, 1e-6);
          by_distance.emplace_back(d, v);
        }
      std::sort(by_distance.begin(), by_distance.end());
      for (size_t k = 1; k < by_distance.size(); ++k) {
        if (by_distance[k].first > by_distance[k - 1].first + 1e-9)
          EXPECT_LT(by_distance[k].second, by_distance[k - 1].second);
        else
          EXPECT_EQ(by_distance[k].second, by_distance[k - 1].second);
      }
    }
  }
}

// slopes=grid: fixed by the built window, not by the window it meets; the gentlest head puts one
// logit between opposite corners of the built window, the steepest keeps ALiBi's 2^(-8/H).
TEST(Alibi2d, GridSlopesPutOneLogitAcrossTheBuiltWindow) {
  Rng rng(0);
  const int64_t H = 4;
  const Grid built{7, 7};
  auto e = make_attention_encoding(parse_encoding("alibi2d:slopes=grid"), H, 16, built, 0, rng);
  for (Grid w : {built, Grid{14, 14}}) {
    const int64_t N = w.count();
    Tensor b = Tensor::empty({H, N, N});
    e->bias(b, {w, 0});
    const double corner = std::hypot(double(w.rows - 1), double(w.cols - 1));
    const double scale = corner / std::hypot(6.0, 6.0);  // distance in built diagonals
    EXPECT_NEAR(b.at(((H - 1) * N + 0) * N + N - 1), -1.0 * scale, 1e-5) << w.str();
    EXPECT_NEAR(b.at((0 * N + 0) * N + N - 1), -0.25 * corner, 1e-5) << w.str();
    EXPECT_NEAR(b.at((0 * N + 0) * N + 1), -0.25, 1e-6) << w.str();  // one column apart
  }
  // A different setting from the default's, and refused values say what is accepted.
  auto plain = make_attention_encoding(parse_encoding("alibi2d"), H, 16, built, 0, rng);
  Tensor a = Tensor::empty({H, 49, 49}), g = Tensor::empty({H, 49, 49});
  plain->bias(a, {built, 0});
  e->bias(g, {built, 0});
  EXPECT_NE(a.at((3 * 49 + 0) * 49 + 48), g.at((3 * 49 + 0) * 49 + 48));
  const std::string m = testing::message_of([] { parse_encoding("alibi2d:slopes=wide"); });
  EXPECT_NE(m.find("alibi"), std::string::npos) << m;
  EXPECT_NE(m.find("grid"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
