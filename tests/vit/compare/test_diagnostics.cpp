// Attention diagnostics: mean attention distance and entropy against values worked
// out by hand for uniform and one-hot attention, the shape check, and a trained model's
// statistics at two sizes.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/tiny_vit.h"
#include "vit/compare/diagnostics.h"

namespace vitpe {
namespace {

TEST(Diagnostics, UniformAndSelfAttentionByHand) {
  const Grid g{2, 2};
  const int64_t P = 1, N = 5, H = 2;
  Tensor uniform = Tensor::full({1, H, N, N}, 1.0f / N);
  std::vector<double> dist;
  double ent = 0;
  int64_t queries = 0;
  accumulate_attention_stats(uniform, P, g, dist, ent, queries);
  ASSERT_EQ(queries, 4);
  ASSERT_EQ(dist.size(), 2u);
  // Every patch of a 2x2 grid sees the others at 0, 1, 1 and sqrt(2) patches.
  EXPECT_NEAR(dist[0] / queries, (2 + std::sqrt(2.0)) / 4, 1e-6);
  EXPECT_NEAR(dist[1] / queries, (2 + std::sqrt(2.0)) / 4, 1e-6);
  EXPECT_NEAR(ent / queries, std::log(5.0), 1e-6);

  Tensor self = Tensor::zeros({1, H, N, N});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < N; ++t) self.f32()[(h * N + t) * N + t] = 1.0f;
  dist.clear();
  ent = 0;
  queries = 0;
  accumulate_attention_stats(self, P, g, dist, ent, queries);
  EXPECT_EQ(dist[0], 0.0);
  EXPECT_EQ(ent, 0.0);

  Tensor wrong = Tensor::zeros({1, H, 4, 4});
  EXPECT_THROW(accumulate_attention_stats(wrong, P, g, dist, ent, queries), ShapeError);
}

// The uniform baselines: every pair counted (a query to itself included), as a uniform map
// measures it; 3.61 patches on 7x7 and 7.28 on 14x14, twice as far on a grid twice as wide.
TEST(Diagnostics, UniformBaselinesMatchAUniformMap) {
  for (Grid g : {Grid{2, 2}, Grid{3, 5}, Grid{7, 7}}) {
    const int64_t P = 2, N = P + g.count();
    Tensor uniform = Tensor::full({1, 1, N, N}, 1.0f / static_cast<float>(N));
    std::vector<double> dist;
    double ent = 0;
    int64_t queries = 0;
    accumulate_attention_stats(uniform, P, g, dist, ent, queries);
    EXPECT_NEAR(uniform_attention_distance(g), dist[0] / static_cast<double>(queries), 1e-5)
        << g.str();
    EXPECT_NEAR(uniform_attention_entropy(P, g), ent / static_cast<double>(queries), 1e-5);
  }
  EXPECT_NEAR(uniform_attention_distance({7, 7}), 3.61, 0.005);
  EXPECT_NEAR(uniform_attention_distance({14, 14}), 7.28, 0.005);
  EXPECT_EQ(uniform_attention_distance({1, 1}), 0.0);
}

TEST(Diagnostics, ModelStatisticsPerBlockAndHead) {
  const ModelConfig c = testing::tiny_vit_config("learned1d", 16, 1, 3, 4);
  auto m = make_model(c, 3);
  DatasetOptions d;
  d.name = "procedural";
  d.train = false;
  d.limit = 40;
  d.rows = d.cols = 16;
  d.procedural.object = 3;
  auto data = make_dataset(d);
  const AttentionStats s = attention_stats(*m, *data);
  ASSERT_EQ(s.distance.size(), 3u);
  ASSERT_EQ(s.distance[0].size(), 2u);
  ASSERT_EQ(s.entropy.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    // Between the extremes of a 4x4 grid: attending only to itself (0) and the largest distance.
    EXPECT_GT(s.distance[b][0], 0.0);
    EXPECT_LT(s.distance[b][0], std::sqrt(18.0));
    // Nearly uniform at initialisation: close to ln 17.
    EXPECT_GT(s.entropy[b], 0.8 * std::log(17.0));
    EXPECT_LE(s.entropy[b], std::log(17.0) + 1e-9);
  }
  // A larger grid: more tokens to spread over.
  d.rows = d.cols = 24;
  auto large = make_dataset(d);
  EXPECT_GT(attention_stats(*m, *large).entropy[0], s.entropy[0]);
}

}  // namespace
}  // namespace vitpe
