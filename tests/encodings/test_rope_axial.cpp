// rope-axial: timm's axial RoPE golden, the published angles (x on the first hd/4 pairs, y on the
// last, theta 100), the relative property on non-square windows, norms preserved, dq/dk against
// finite differences, and the head_dim % 4 error.
#include <cmath>

#include "golden.h"
#include "rope_testing.h"

namespace vitpe {
namespace {

std::unique_ptr<AttentionEncoding> make_rope_axial(int64_t H, int64_t hd, Grid w, int64_t prefix,
                                                   const std::string& spec = "rope-axial") {
  Rng rng(0);
  return make_attention_encoding(parse_encoding(spec), H, hd, w, prefix, rng);
}

TEST(RopeAxial, PublishedAngles) {
  const int64_t H = 2, hd = 16, P = 1;
  Grid w{3, 5};
  auto e = make_rope_axial(H, hd, w, P);
  EXPECT_TRUE(e->has_rotation());
  EXPECT_FALSE(e->has_bias());
  EXPECT_TRUE(e->params().empty());
  const int64_t N = P + w.count();
  Tensor q = testing::random_tensor({1, H, N, hd}, 1), qo = Tensor::empty(q.shape());
  Tensor ko = Tensor::empty(q.shape());
  e->rotate(qo, ko, q, q, {w, P});
  const int64_t tok = P + 2 * 5 + 3;  // y = 2, x = 3
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < hd / 2; ++p) {
      int64_t kk = p % (hd / 4);
      double a = (p < hd / 4 ? 3.0 : 2.0) * std::pow(100.0, -4.0 * kk / hd);
      const float* x = &q.at((h * N + tok) * hd + 2 * p);
      EXPECT_NEAR(qo.at((h * N + tok) * hd + 2 * p), x[0] * std::cos(a) - x[1] * std::sin(a), 1e-5);
      EXPECT_NEAR(qo.at((h * N + tok) * hd + 2 * p + 1), x[1] * std::cos(a) + x[0] * std::sin(a),
                  1e-5);
    }
}

// timm's RotaryEmbeddingCat as its axial RoPE-ViT models (Eva, rope_type 'cat') configure it.
TEST(RopeAxial, MatchesTimm) {
  const auto& m = testing::golden_meta("rope_axial_q");
  Grid w{m.at("rows"), m.at("cols")};
  int64_t P = m.at("prefix");
  Tensor q = testing::golden("rope_axial_q");
  auto e = make_rope_axial(q.size(1), q.size(3), w, P);
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
  e->rotate(qo, ko, q, q, {w, P});
  EXPECT_LT(testing::max_rel_error(qo, testing::golden("rope_axial_q_rot")), 1e-5);
}

TEST(RopeAxial, RelativePropertyOnNonSquareGrids) {
  for (Grid w : {Grid{3, 5}, Grid{6, 2}}) {
    auto e = make_rope_axial(2, 16, w, 1);
    testing::check_relative_property(*e, 2, 16, w, 1);
  }
  // A window other than the built one simply uses larger coordinates.
  auto e = make_rope_axial(2, 8, {2, 2}, 0, "rope-axial:theta=10");
  testing::check_relative_property(*e, 2, 8, {4, 7}, 0);
}

TEST(RopeAxial, PreservesNorms) {
  auto e = make_rope_axial(1, 8, {4, 3}, 0);
  testing::check_preserves_norms(*e, 8, {4, 3});
}

TEST(RopeAxial, BackwardMatchesFiniteDifferences) {
  auto e = make_rope_axial(2, 8, {2, 3}, 1);
  testing::check_rotate_backward(*e, 2, 8, {2, 3}, 1);
}

TEST(RopeAxial, HeadDimMustBeDivisibleBy4) {
  try {
    make_rope_axial(2, 6, {2, 2}, 0);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim must be divisible by 4"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("6"), std::string::npos);
  }
  auto e = make_rope_axial(2, 8, {2, 2}, 0);
  Tensor q = Tensor::zeros({1, 2, 5, 8}), o = Tensor::zeros({1, 2, 5, 8}), o2 = o.clone();
  EXPECT_THROW(e->rotate(o, o2, q, q, {{2, 2}, 0}), ShapeError);
}

}  // namespace
}  // namespace vitpe
