// Shared building blocks: the RoPE kernel against complex multiplication, the table <-> planes
// round trip, and DerivedCache recomputing exactly when its sources change.
#include <algorithm>
#include <cmath>
#include <complex>

#include "encodings/kinds.h"
#include "rope_testing.h"
#include "tests/testing.h"

namespace vitpe::enc {
namespace {

TEST(Kinds, RopeRotateIsComplexMultiplication) {
  const int64_t B = 2, H = 3, P = 1, NW = 4, hd = 8;
  Tensor x = testing::random_tensor({B, H, P + NW, hd}, 1), out = Tensor::empty(x.shape());
  Tensor ang = testing::random_tensor({H, NW, hd / 2}, 2, 3.0);
  Tensor c = Tensor::empty(ang.shape()), s = Tensor::empty(ang.shape());
  for (int64_t i = 0; i < ang.numel(); ++i)
    c.at(i) = std::cos(ang.at(i)), s.at(i) = std::sin(ang.at(i));
  rope_rotate(out, x, c, s, P);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < P + NW; ++n)
        for (int64_t p = 0; p < hd / 2; ++p) {
          const int64_t o = ((b * H + h) * (P + NW) + n) * hd + 2 * p;
          std::complex<double> z(x.at(o), x.at(o + 1));
          if (n >= P)
            z *= std::polar(1.0, static_cast<double>(ang.at((h * NW + n - P) * hd / 2 + p)));
          EXPECT_NEAR(out.at(o), z.real(), 1e-5);
          EXPECT_NEAR(out.at(o + 1), z.imag(), 1e-5);
        }
}

// The inference rotation in place in qkv rows [B, N, 3D] is the rotation of the split layout:
// q and k of every head turned as rotate() turns them, v and the prefix rows untouched; for every
// rotary kind (their own in-place kernels) and the interface's default (copies around rotate()),
// on the built window and on a larger one under a policy that rescales coordinates.
TEST(Kinds, RotateInQkvRowsEqualsTheSplitRotation) {
  const int64_t B = 2, H = 2, hd = 8, D = H * hd, prefix = 1;
  const Grid built{3, 4};
  for (const std::string spec : {"rope-axial", "rope-axial:indexing=ij", "rope-mixed",
                                 "rope-dinov3", "rope-dinov3:normalize=max"}) {
    Rng rng(5);
    auto e = make_attention_encoding(parse_encoding(spec), H, hd, built, prefix, rng);
    for (Grid w : {built, Grid{5, 6}}) {
      e->set_extension_policy(w == built ? ExtensionPolicy::native : ExtensionPolicy::ntk);
      const AttnGeometry geom{w, prefix};
      const int64_t N = geom.tokens();
      const Tensor qkv = testing::random_tensor({B, N, 3 * D}, 7);
      Tensor q = Tensor::empty({B, H, N, hd}), k = Tensor::empty({B, H, N, hd});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t c = 0; c < hd; ++c) {
              q.at(((b * H + h) * N + n) * hd + c) = qkv.at((b * N + n) * 3 * D + h * hd + c);
              k.at(((b * H + h) * N + n) * hd + c) = qkv.at((b * N + n) * 3 * D + D + h * hd + c);
            }
      Tensor qr = Tensor::empty(q.shape()), kr = Tensor::empty(k.shape());
      e->rotate(qr, kr, q, k, geom);
      Tensor own = qkv.clone(), fallback = qkv.clone();
      e->rotate_qkv_rows(own, H, geom);
      e->AttentionEncoding::rotate_qkv_rows(fallback, H, geom);
      double worst = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t c = 0; c < hd; ++c) {
              const int64_t row = (b * N + n) * 3 * D, split = ((b * H + h) * N + n) * hd + c;
              for (const Tensor* t : {&own, &fallback}) {
                worst = std::max(worst, std::fabs(static_cast<double>(t->at(row + h * hd + c)) -
                                                  qr.at(split)));
                worst = std::max(worst, std::fabs(static_cast<double>(
                                                      t->at(row + D + h * hd + c)) -
                                                  kr.at(split)));
                EXPECT_EQ(t->at(row + 2 * D + h * hd + c), qkv.at(row + 2 * D + h * hd + c));
              }
            }
      EXPECT_LT(worst, 1e-6) << spec << " on " << w.str();
      // The prefix row is not turned, and the others are.
      for (int64_t i = 0; i < 3 * D; ++i) EXPECT_EQ(own.at(i), qkv.at(i)) << spec;
      EXPECT_GT(testing::max_rel_error(own, qkv), 1e-3) << spec;
    }
  }
  // A shape that does not fit the angles is refused.
  Rng rng(5);
  auto e = make_attention_encoding(parse_encoding("rope-axial"), H, hd, built, prefix, rng);
  Tensor wrong = Tensor::zeros({1, 5, 3 * D});
  EXPECT_THROW(e->rotate_qkv_rows(wrong, H, {built, prefix}), ShapeError);
}

// DINOv3's coordinate augmentation on the integer-coordinate rotary kinds: only while a training
// step's seed is handed over; then patch (row, col) turns as if at (a_y row + b_y, a_x col + b_x),
// DINOv3's ((c + shift) jitter) rescale about the window's centre with a shift of 1 moving half
// the window (written out here from the draw's order: shift y, x, jitter y, x, rescale); the
// same seed the same rotation, another seed another; its backward against finite differences.
TEST(Kinds, IntegerRotaryKindsAugmentCoordinatesAsDinov3) {
  const int64_t H = 2, hd = 8, half = hd / 2, P = 1;
  const Grid w{3, 4};
  const int64_t N = P + w.count();
  for (const std::string kind : {"rope-axial", "rope-mixed"}) {
    Rng r1(5), r2(5);
    auto plain = make_attention_encoding(parse_encoding(kind), H, hd, w, P, r1);
    auto e = make_attention_encoding(parse_encoding(kind + ":shift=0.5,jitter=1.5,rescale=2"), H,
                                     hd, w, P, r2);
    EXPECT_FALSE(plain->augments());
    EXPECT_TRUE(e->augments());
    const Tensor freqs = plain->terms({w, P}).rotation_freqs;  // [H, hd/2, 2], integer coordinates
    const Tensor q = testing::random_tensor({1, H, N, hd}, 4);
    auto rotated = [&](AttentionEncoding& part) {
      Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
      part.rotate(qo, ko, q, q, {w, P});
      return qo;
    };
    const Tensor unmoved = rotated(*plain);
    EXPECT_EQ(testing::max_abs_diff(rotated(*e), unmoved), 0.0) << kind;
    e->set_augmentation(7);
    const Tensor drawn = rotated(*e);
    EXPECT_GT(testing::max_abs_diff(drawn, unmoved), 1e-3) << kind;
    Rng rng(7);
    const double sy = rng.uniform(-0.5, 0.5), sx = rng.uniform(-0.5, 0.5);
    const double jy = std::exp(rng.uniform(-std::log(1.5), std::log(1.5)));
    const double jx = std::exp(rng.uniform(-std::log(1.5), std::log(1.5)));
    const double r = std::exp(rng.uniform(-std::log(2.0), std::log(2.0)));
    for (int64_t row = 0; row < w.rows; ++row)
      for (int64_t col = 0; col < w.cols; ++col) {
        const double y = ((row - 1.0) + sy * 3 / 2) * jy * r + 1.0;  // centre (3 - 1) / 2
        const double x = ((col - 1.5) + sx * 4 / 2) * jx * r + 1.5;  // centre (4 - 1) / 2
        for (int64_t h = 0; h < H; ++h)
          for (int64_t p = 0; p < half; ++p) {
            const double a = x * freqs.at((h * half + p) * 2) + y * freqs.at((h * half + p) * 2 + 1);
            const int64_t o = (h * N + P + row * w.cols + col) * hd + 2 * p;
            const double x0 = q.at(o), x1 = q.at(o + 1);
            EXPECT_NEAR(drawn.at(o), x0 * std::cos(a) - x1 * std::sin(a), 1e-5) << kind;
            EXPECT_NEAR(drawn.at(o + 1), x1 * std::cos(a) + x0 * std::sin(a), 1e-5) << kind;
          }
      }
    testing::check_rotate_backward(*e, H, hd, w, P);  // the drawn rotation's backward
    e->set_augmentation(8);
    EXPECT_GT(testing::max_abs_diff(rotated(*e), drawn), 1e-4) << kind;
    e->set_augmentation(7);
    EXPECT_EQ(testing::max_abs_diff(rotated(*e), drawn), 0.0) << kind;
    e->set_augmentation(std::nullopt);
    EXPECT_EQ(testing::max_abs_diff(rotated(*e), unmoved), 0.0) << kind;
  }
}

TEST(Kinds, PlanesRoundTrip) {
  Grid g{3, 4};
  Tensor t = testing::random_tensor({2 + 12, 5}, 3);
  Tensor planes = patch_rows_to_planes(t, 2, g);
  ASSERT_EQ(planes.shape(), Shape({5, 3, 4}));
  EXPECT_EQ(planes.at(1 * 12 + 2 * 4 + 3), t.at((2 + 11) * 5 + 1));  // channel 1, row 2, col 3
  Tensor back = Tensor::zeros(t.shape());
  planes_to_patch_rows(planes, back, 2, g, false);
  for (int64_t i = 2 * 5; i < t.numel(); ++i) EXPECT_EQ(back.at(i), t.at(i));
}

TEST(Kinds, DerivedCacheRecomputesOnlyOnChange) {
  DerivedCache cache;
  Tensor src = Tensor::full({4}, 1.f);
  int calls = 0;
  auto compute = [&] {
    ++calls;
    return Tensor::full({1}, src.at(0));
  };
  EXPECT_EQ(cache.get({2, 2}, {&src}, compute).at(0), 1.f);
  EXPECT_EQ(cache.get({2, 2}, {&src}, compute).at(0), 1.f);
  EXPECT_EQ(calls, 1);
  src.at(0) = 5.f;
  EXPECT_EQ(cache.get({2, 2}, {&src}, compute).at(0), 5.f);
  EXPECT_EQ(calls, 2);
  cache.get({3, 2}, {&src}, compute);
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace vitpe::enc
