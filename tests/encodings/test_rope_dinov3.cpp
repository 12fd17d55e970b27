// rope-dinov3: timm's RotaryEmbeddingDinoV3 golden on its own grid and on another non-square
// one, the angles written out here from the formula (halves, normalised coordinates, y first),
// the relative property, norms preserved, dq/dk against finite differences, the extrapolate
// policy's built denominators, and the head_dim % 4 error.
#include <cmath>
#include <numbers>

#include "golden.h"
#include "rope_testing.h"

namespace vitpe {
namespace {

std::unique_ptr<AttentionEncoding> make_rope_dinov3(int64_t H, int64_t hd, Grid w, int64_t prefix,
                                                    const std::string& spec = "rope-dinov3") {
  Rng rng(0);
  return make_attention_encoding(parse_encoding(spec), H, hd, w, prefix, rng);
}

// The rotation of channels (p, p + hd/2) of token `tok` by angle a, against `qo`.
void expect_rotated(const Tensor& q, const Tensor& qo, int64_t base, int64_t p, int64_t hd,
                    double a) {
  const double x0 = q.at(base + p), x1 = q.at(base + p + hd / 2);
  EXPECT_NEAR(qo.at(base + p), x0 * std::cos(a) - x1 * std::sin(a), 1e-5) << "pair " << p;
  EXPECT_NEAR(qo.at(base + p + hd / 2), x1 * std::cos(a) + x0 * std::sin(a), 1e-5) << "pair " << p;
}

TEST(RopeDinov3, AnglesFromTheFormula) {
  const int64_t H = 2, hd = 16, P = 5;
  Grid w{3, 5};
  auto e = make_rope_dinov3(H, hd, w, P);
  EXPECT_TRUE(e->has_rotation());
  EXPECT_FALSE(e->has_bias());
  EXPECT_TRUE(e->params().empty());
  EXPECT_EQ(e->extension_rule(), ExtensionRule::interpolate);
  const int64_t N = P + w.count();
  Tensor q = testing::random_tensor({1, H, N, hd}, 1), qo = Tensor::empty(q.shape());
  Tensor ko = Tensor::empty(q.shape());
  e->rotate(qo, ko, q, q, {w, P});
  const int64_t row = 2, col = 1;
  const double y = 2.0 * (row + 0.5) / 3 - 1, x = 2.0 * (col + 0.5) / 5 - 1;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t base = (h * N + P + row * 5 + col) * hd;
    for (int64_t p = 0; p < hd / 2; ++p) {
      const int64_t k = p % (hd / 4);
      const double period = std::pow(100.0, 4.0 * k / hd);
      expect_rotated(q, qo, base, p, hd, 2 * std::numbers::pi * (p < hd / 4 ? y : x) / period);
    }
    // Prefix tokens are copied.
    for (int64_t c = 0; c < P * hd; ++c) EXPECT_EQ(qo.at(h * N * hd + c), q.at(h * N * hd + c));
  }
}

// timm's RotaryEmbeddingDinoV3 as its Eva vit_*_patch16_dinov3 models build it, at the built
// 3x5 grid and at 6x4 (normalised on that grid: the native interpolate).
TEST(RopeDinov3, MatchesTimm) {
  for (const std::string name : {"rope_dinov3_q", "rope_dinov3_q_6x4"}) {
    const auto& m = testing::golden_meta(name);
    Grid w{m.at("rows"), m.at("cols")};
    const int64_t P = m.at("prefix");
    Tensor q = testing::golden(name);
    auto e = make_rope_dinov3(q.size(1), q.size(3), {3, 5}, P);
    Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
    e->rotate(qo, ko, q, q, {w, P});
    EXPECT_LT(testing::max_rel_error(qo, testing::golden(name + "_rot")), 1e-5) << name;
  }
}

TEST(RopeDinov3, RelativePropertyOnNonSquareGrids) {
  for (Grid w : {Grid{3, 5}, Grid{6, 2}}) {
    auto e = make_rope_dinov3(2, 16, w, 1);
    testing::check_relative_property(*e, 2, 16, w, 1);
  }
  auto e = make_rope_dinov3(2, 8, {2, 2}, 0, "rope-dinov3:normalize=max,indexing=xy");
  testing::check_relative_property(*e, 2, 8, {4, 7}, 0);
}

TEST(RopeDinov3, PreservesNorms) {
  auto e = make_rope_dinov3(1, 8, {4, 3}, 0);
  testing::check_preserves_norms(*e, 8, {4, 3});
}

TEST(RopeDinov3, BackwardMatchesFiniteDifferences) {
  auto e = make_rope_dinov3(2, 8, {2, 3}, 1);
  testing::check_rotate_backward(*e, 2, 8, {2, 3}, 1);
}

// Under the extrapolate policy a larger grid keeps the built grid's denominators: its last
// column's x runs past +1 (2 (5 + 0.5) / 3 - 1 on a 6-column grid built for 3).
TEST(RopeDinov3, ExtrapolateKeepsTheBuiltDenominators) {
  const int64_t hd = 8;
  auto e = make_rope_dinov3(1, hd, {2, 3}, 0);
  e->set_extension_policy(ExtensionPolicy::extrapolate);
  EXPECT_EQ(e->extension_rule(), ExtensionRule::extrapolate);
  Grid w{2, 6};
  Tensor q = testing::random_tensor({1, 1, w.count(), hd}, 3), qo = Tensor::empty(q.shape());
  Tensor ko = Tensor::empty(q.shape());
  e->rotate(qo, ko, q, q, {w, 0});
  const double x = 2.0 * 5.5 / 3 - 1, y = 2.0 * 1.5 / 2 - 1;
  const int64_t base = (1 * 6 + 5) * hd;
  for (int64_t p = 0; p < hd / 2; ++p) {
    const double period = std::pow(100.0, 4.0 * (p % (hd / 4)) / hd);
    expect_rotated(q, qo, base, p, hd, 2 * std::numbers::pi * (p < hd / 4 ? y : x) / period);
  }
}

// DINOv3's coordinate augmentation: while a training step has handed over its seed, the
// coordinates are ((c + shift) * jitter) * rescale with the draws of Rng(seed) in timm's order
// (shift y, x; jitter y, x; rescale); the same seed draws the same, and without a seed (or
// without the options) the plain tables come back bit for bit.
TEST(RopeDinov3, CoordinateAugmentationOnlyWhileASeedIsHanded) {
  const int64_t H = 1, hd = 8, P = 1;
  Grid w{3, 4};
  const int64_t N = P + w.count();
  auto plain_part = make_rope_dinov3(H, hd, w, P);
  auto e = make_rope_dinov3(H, hd, w, P, "rope-dinov3:shift=0.5,jitter=1.5,rescale=2");
  EXPECT_FALSE(plain_part->augments());
  EXPECT_TRUE(e->augments());
  Tensor q = testing::random_tensor({1, H, N, hd}, 4);
  auto rotated = [&](AttentionEncoding& part) {
    Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
    part.rotate(qo, ko, q, q, {w, P});
    return qo;
  };
  const Tensor plain = rotated(*e);
  plain_part->set_augmentation(7);
  EXPECT_EQ(testing::max_abs_diff(rotated(*plain_part), plain), 0.0);
  e->set_augmentation(7);
  const Tensor drawn = rotated(*e);
  EXPECT_GT(testing::max_abs_diff(drawn, plain), 1e-3);
  Rng rng(7);
  const double sy = rng.uniform(-0.5, 0.5), sx = rng.uniform(-0.5, 0.5);
  const double jy = std::exp(rng.uniform(-std::log(1.5), std::log(1.5)));
  const double jx = std::exp(rng.uniform(-std::log(1.5), std::log(1.5)));
  const double r = std::exp(rng.uniform(-std::log(2.0), std::log(2.0)));
  const int64_t row = 2, col = 3;
  const double y = (2.0 * (row + 0.5) / 3 - 1 + sy) * jy * r;
  const double x = (2.0 * (col + 0.5) / 4 - 1 + sx) * jx * r;
  for (int64_t p = 0; p < hd / 2; ++p) {
    const double period = std::pow(100.0, 4.0 * (p % (hd / 4)) / hd);
    expect_rotated(q, drawn, (P + row * 4 + col) * hd, p, hd,
                   2 * std::numbers::pi * (p < hd / 4 ? y : x) / period);
  }
  testing::check_rotate_backward(*e, H, hd, w, P);  // the drawn rotation's backward
  e->set_augmentation(8);
  EXPECT_GT(testing::max_abs_diff(rotated(*e), drawn), 1e-4);
  e->set_augmentation(7);
  EXPECT_EQ(testing::max_abs_diff(rotated(*e), drawn), 0.0);
  e->set_augmentation(std::nullopt);
  EXPECT_EQ(testing::max_abs_diff(rotated(*e), plain), 0.0);
  // Options are positive numbers or none.
  EXPECT_THROW(parse_encoding("rope-dinov3:rescale=0"), std::invalid_argument);
  EXPECT_EQ(parse_encoding("rope-dinov3:rescale=none").str(), "rope-dinov3:rescale=none");
}

TEST(RopeDinov3, HeadDimMustBeDivisibleBy4) {
  try {
    make_rope_dinov3(2, 6, {2, 2}, 0);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim must be divisible by 4"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("6"), std::string::npos);
  }
}

}  // namespace
}  // namespace vitpe
