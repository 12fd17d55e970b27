// rope-mixed: timm's RoPE-Mixed golden (freqs, q, k -> rotated q, k), the published init, the
// relative property on non-square windows, and dq, dk and the frequency gradients against
// finite differences.
#include <cmath>

#include "golden.h"
#include "rope_testing.h"

namespace vitpe {
namespace {

std::unique_ptr<AttentionEncoding> make_rope_mixed(int64_t H, int64_t hd, Grid w, int64_t prefix,
                                                   uint64_t seed = 0) {
  Rng rng(seed);
  return make_attention_encoding(parse_encoding("rope-mixed"), H, hd, w, prefix, rng);
}

TEST(RopeMixed, MatchesTimm) {
  const auto& m = testing::golden_meta("rope_mixed_q");
  Grid w{m.at("rows"), m.at("cols")};
  int64_t P = m.at("prefix");
  Tensor q = testing::golden("rope_mixed_q"), k = testing::golden("rope_mixed_k");
  auto e = make_rope_mixed(q.size(1), q.size(3), w, P);
  Param* f = e->params()[0];
  EXPECT_EQ(f->name, "attn.rope.freqs");
  EXPECT_TRUE(f->no_decay);
  f->value.copy_from(testing::golden("rope_mixed_freqs"));
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
  e->rotate(qo, ko, q, k, {w, P});
  EXPECT_LT(testing::max_rel_error(qo, testing::golden("rope_mixed_q_rot")), 1e-5);
  EXPECT_LT(testing::max_rel_error(ko, testing::golden("rope_mixed_k_rot")), 1e-5);
}

TEST(RopeMixed, PublishedInit) {
  const int64_t H = 6, hd = 32, half = 16, quarter = 8;
  auto e = make_rope_mixed(H, hd, {14, 14}, 1, 5);
  Tensor f = e->params()[0]->value;
  ASSERT_EQ(f.shape(), Shape({2, H, half}));
  std::vector<double> phis;
  for (int64_t h = 0; h < H; ++h) {
    double phi = std::atan2(f.at(half * H + h * half), f.at(h * half));  // m_0 = 1
    phis.push_back(phi);
    for (int64_t k = 0; k < quarter; ++k) {
      double mk = std::pow(10.0, -4.0 * k / hd);
      EXPECT_NEAR(f.at(h * half + k), mk * std::cos(phi), 1e-6);
      EXPECT_NEAR(f.at(H * half + h * half + k), mk * std::sin(phi), 1e-6);
      EXPECT_NEAR(f.at(h * half + quarter + k), -mk * std::sin(phi), 1e-6);
      EXPECT_NEAR(f.at(H * half + h * half + quarter + k), mk * std::cos(phi), 1e-6);
    }
  }
  // A random phase per head: not all equal.
  EXPECT_GT(
      *std::max_element(phis.begin(), phis.end()) - *std::min_element(phis.begin(), phis.end()),
      0.1);
}

TEST(RopeMixed, RelativePropertyOnNonSquareGrids) {
  for (Grid w : {Grid{3, 5}, Grid{5, 2}}) {
    auto e = make_rope_mixed(3, 16, w, 1, 7);
    testing::check_relative_property(*e, 3, 16, w, 1);
  }
}

TEST(RopeMixed, BackwardMatchesFiniteDifferences) {
  auto e = make_rope_mixed(2, 8, {2, 3}, 1, 9);
  testing::check_rotate_backward(*e, 2, 8, {2, 3}, 1);
}

// The angle tables are kept between calls and made again exactly when what they depend on
// changes: the frequencies (an optimizer step, a load), the window and the policy. Each result
// equals a fresh encoding's given the same frequencies and policy.
TEST(RopeMixed, TablesFollowTheFrequenciesWindowAndPolicy) {
  const Grid built{3, 4}, big{5, 6};
  auto e = make_rope_mixed(2, 8, built, 1);
  auto rotated = [](AttentionEncoding& enc, Grid w) {
    const AttnGeometry g{w, 1};
    const Tensor q = testing::random_tensor({1, 2, g.tokens(), 8}, 3);
    Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
    enc.rotate(qo, ko, q, q, g);
    return qo;
  };
  auto fresh = [&](ExtensionPolicy p) {
    auto f = make_rope_mixed(2, 8, built, 1);
    f->params()[0]->value.copy_from(e->params()[0]->value);
    f->set_extension_policy(p);
    return f;
  };
  const Tensor first = rotated(*e, built);
  EXPECT_EQ(testing::max_rel_error(rotated(*e, built), first), 0.0);
  e->params()[0]->value.f32()[3] += 0.25f;  // a step
  const Tensor stepped = rotated(*e, built);
  EXPECT_GT(testing::max_rel_error(stepped, first), 1e-4);
  EXPECT_EQ(testing::max_rel_error(stepped, rotated(*fresh(ExtensionPolicy::native), built)), 0.0);
  const Tensor on_big = rotated(*e, big);
  EXPECT_EQ(testing::max_rel_error(on_big, rotated(*fresh(ExtensionPolicy::native), big)), 0.0);
  e->set_extension_policy(ExtensionPolicy::interpolate);
  const Tensor interpolated = rotated(*e, big);
  EXPECT_GT(testing::max_rel_error(interpolated, on_big), 1e-4);
  EXPECT_EQ(
      testing::max_rel_error(interpolated, rotated(*fresh(ExtensionPolicy::interpolate), big)),
      0.0);
}

TEST(RopeMixed, HeadDimMustBeDivisibleBy4) {
  EXPECT_THROW(make_rope_mixed(2, 10, {2, 2}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
