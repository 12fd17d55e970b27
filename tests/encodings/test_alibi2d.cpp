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

}  // namespace
}  // namespace vitpe
