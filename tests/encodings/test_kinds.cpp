// Shared building blocks: the RoPE kernel against complex multiplication, the table <-> planes
// round trip, and DerivedCache recomputing exactly when its sources change.
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
