// Shared building blocks: the RoPE kernel against complex multiplication, the table <-> planes
// round trip, and DerivedCache recomputing exactly when its sources change.
#include <algorithm>
#include <cmath>
#include <complex>

#include "encodings/kinds.h"
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
