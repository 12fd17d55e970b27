// ops/attention_terms.h on the CPU: the index arithmetic the attention kernels run (and the CPU
// path's dense bias) for relbias, ALiBi-2D, the Swin shift mask and RoPE. Plain C++ here
// (__host__ __device__ under nvcc), so these run in every build: each term is compared with a
// dense tensor built independently (timm's construction, tests/attention_reference.h) and with
// the terms the project's encodings report.
#include <gtest/gtest.h>

#include <cmath>

#include "encodings/encoding.h"
#include "encodings/tables.h"
#include "ops/attention_terms.h"
#include "tests/attention_reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::alibi_dense;
using testing::relbias_dense;
using testing::shift_mask_dense;

// attn_bias_at over all (b, h, i, j) -> [B, H, N, N]
Tensor in_kernel_bias(const AttnBiasArgs& a) {
  Tensor out = Tensor::empty(Shape{a.B, a.H, a.N, a.N});
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.H; ++h)
      for (int i = 0; i < a.N; ++i)
        for (int j = 0; j < a.N; ++j)
          out.at(((static_cast<int64_t>(b) * a.H + h) * a.N + i) * a.N + j) =
              attn_bias_at(a, b, h, i, j);
  return out;
}

// Expected [B, H, N, N] from a per-head dense [H, N, N] and a per-window mask [W, N, N].
double max_diff(const Tensor& got, const Tensor& dense, const Tensor& mask) {
  const int64_t B = got.size(0), H = got.size(1), N = got.size(2);
  double d = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t ij = 0; ij < N * N; ++ij) {
        double want = 0;
        if (dense.defined()) want += dense.at(h * N * N + ij);
        if (mask.defined()) want += mask.at((b % mask.size(0)) * N * N + ij);
        d = std::max(d, std::fabs(got.at((b * H + h) * N * N + ij) - want));
      }
  return d;
}

TEST(AttentionTerms, RelbiasMatchesTimmIndexWithoutPrefix) {
  const int H = 3, Mh = 7, Mw = 7;
  Tensor table = testing::random_tensor(Shape{(2 * Mh - 1) * (2 * Mw - 1), H}, 1);
  AttnBiasArgs a;
  a.B = 2, a.H = H, a.N = Mh * Mw, a.Mh = Mh, a.Mw = Mw;
  a.table = table.f32();
  a.table_rows = static_cast<int>(table.size(0));
  EXPECT_EQ(max_diff(in_kernel_bias(a), relbias_dense(table, H, 0, Mh, Mw), {}), 0.0);
}

TEST(AttentionTerms, RelbiasWithClassTokenAndNonSquareWindow) {
  const int H = 2, Mh = 3, Mw = 5, P = 1;
  Tensor table = testing::random_tensor(Shape{(2 * Mh - 1) * (2 * Mw - 1) + 3, H}, 2);
  AttnBiasArgs a;
  a.B = 1, a.H = H, a.N = P + Mh * Mw, a.prefix = P, a.Mh = Mh, a.Mw = Mw;
  a.table = table.f32();
  a.table_rows = static_cast<int>(table.size(0));
  EXPECT_EQ(max_diff(in_kernel_bias(a), relbias_dense(table, H, P, Mh, Mw), {}), 0.0);
}

TEST(AttentionTerms, RelbiasMatchesTheEncoding) {
  // The project's relbias encoding (with a class token) gives the same bias from its table.
  for (int64_t prefix : {0, 1}) {
    const int64_t H = 4, Mh = 4, Mw = 6;
    Rng rng(3);
    auto enc = make_attention_encoding(parse_encoding("relbias"), H, 32, Grid{Mh, Mw}, prefix, rng);
    ASSERT_TRUE(enc);
    const Tensor& table = enc->params().at(0)->value;
    const AttnGeometry geom{Grid{Mh, Mw}, prefix};
    Tensor dense = Tensor::empty(Shape{H, geom.tokens(), geom.tokens()});
    enc->bias(dense, geom);
    AttnBiasArgs a;
    a.B = 1, a.H = static_cast<int>(H), a.N = static_cast<int>(geom.tokens());
    a.prefix = static_cast<int>(prefix), a.Mh = static_cast<int>(Mh), a.Mw = static_cast<int>(Mw);
    a.table = table.f32();
    a.table_rows = static_cast<int>(table.size(0));
    EXPECT_EQ(max_diff(in_kernel_bias(a), dense, {}), 0.0) << "prefix " << prefix;
  }
}

TEST(AttentionTerms, AlibiMatchesDenseAndTheEncoding) {
  const int64_t H = 6, Mh = 5, Mw = 4, P = 1;
  Rng rng(4);
  auto enc = make_attention_encoding(parse_encoding("alibi2d"), H, 32, Grid{Mh, Mw}, P, rng);
  ASSERT_TRUE(enc);
  Tensor slopes = enc->terms(AttnGeometry{Grid{Mh, Mw}, P}).distance_slopes;
  ASSERT_EQ(slopes.shape(), Shape({H}));
  for (int64_t h = 0; h < H; ++h)
    EXPECT_FLOAT_EQ(slopes.at(h), static_cast<float>(std::pow(2.0, -8.0 * (h + 1) / H)));
  AttnBiasArgs a;
  a.B = 1, a.H = H, a.N = P + Mh * Mw, a.prefix = P, a.Mh = Mh, a.Mw = Mw;
  a.slopes = slopes.f32();
  Tensor got = in_kernel_bias(a);
  EXPECT_LT(max_diff(got, alibi_dense(H, P, Mh, Mw), {}), 1e-5);

  Tensor dense = Tensor::empty(Shape{H, a.N, a.N});
  enc->bias(dense, AttnGeometry{Grid{Mh, Mw}, P});
  EXPECT_LT(max_diff(got, dense, {}), 1e-5);
}

TEST(AttentionTerms, ShiftMaskMatchesTimmConstruction) {
  // Swin-T stage 1 at 224: 56x56 tokens, window 7, shift 3 (64 windows), and a non-square
  // image with a rectangular window; 2 images each so b % nW is exercised.
  struct Case {
    int R, C, Mh, Mw, sr, sc;
  };
  for (Case c : {Case{56, 56, 7, 7, 3, 3}, Case{8, 12, 4, 3, 2, 1}, Case{14, 14, 7, 7, 3, 0}}) {
    const int nW = (c.R / c.Mh) * (c.C / c.Mw);
    AttnBiasArgs a;
    a.B = 2 * nW, a.H = 1, a.N = c.Mh * c.Mw, a.Mh = c.Mh, a.Mw = c.Mw;
    a.shift = true, a.shift_r = c.sr, a.shift_c = c.sc, a.image_rows = c.R, a.image_cols = c.C;
    Tensor mask = shift_mask_dense(c.R, c.C, c.Mh, c.Mw, c.sr, c.sc);
    EXPECT_EQ(max_diff(in_kernel_bias(a), {}, mask), 0.0) << c.R << "x" << c.C;
    // The mask is not trivial: the last window has several regions.
    double mn = 0;
    for (int64_t i = 0; i < mask.numel(); ++i) mn = std::min(mn, static_cast<double>(mask.at(i)));
    EXPECT_EQ(mn, -100.0);
  }
}

TEST(AttentionTerms, TermsAddUp) {
  // dense bias + dense mask + relbias + alibi + shift mask all at once.
  const int H = 2, Mh = 4, Mw = 4, R = 8, C = 8, nW = 4;
  const int N = Mh * Mw;
  Tensor table = testing::random_tensor(Shape{(2 * Mh - 1) * (2 * Mw - 1), H}, 5);
  Tensor dense = testing::random_tensor(Shape{H, N, N}, 6);
  Tensor mask = testing::random_tensor(Shape{nW, N, N}, 7);
  Tensor slopes = Tensor::empty(Shape{H});
  for (int h = 0; h < H; ++h) slopes.at(h) = static_cast<float>(std::pow(2.0, -8.0 * (h + 1) / H));
  AttnBiasArgs a;
  a.B = 3 * nW, a.H = H, a.N = N, a.Mh = Mh, a.Mw = Mw;
  a.dense = dense.f32();
  a.mask = mask.f32();
  a.mask_windows = nW;
  a.table = table.f32();
  a.table_rows = static_cast<int>(table.size(0));
  a.slopes = slopes.f32();
  a.shift = true, a.shift_r = 2, a.shift_c = 2, a.image_rows = R, a.image_cols = C;
  Tensor want_h = testing::add_tensors(
      testing::add_tensors(dense, relbias_dense(table, H, 0, Mh, Mw)), alibi_dense(H, 0, Mh, Mw));
  Tensor want_w = testing::add_tensors(mask, shift_mask_dense(R, C, Mh, Mw, 2, 2));
  EXPECT_LT(max_diff(in_kernel_bias(a), want_h, want_w), 1e-5);
}

TEST(AttentionTerms, RopeAxialFreqsMatchTheEncoding) {
  // Rotating with the encoding's terms (through rope_angle) equals its own rotate().
  const int64_t B = 2, H = 3, hd = 32, Mh = 3, Mw = 4, P = 1, N = P + Mh * Mw;
  Tensor freqs = rope_axial_freqs(H, hd, RopeAxialLayout{});
  Tensor q = testing::random_tensor(Shape{B, H, N, hd}, 8);
  Tensor k = testing::random_tensor(Shape{B, H, N, hd}, 9);
  Rng rng(10);
  auto enc = make_attention_encoding(parse_encoding("rope-axial"), H, hd, Grid{Mh, Mw}, P, rng);
  ASSERT_TRUE(enc);
  EXPECT_EQ(testing::max_rel_error(enc->terms(AttnGeometry{Grid{Mh, Mw}, P}).rotation_freqs, freqs),
            0.0);
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
  enc->rotate(qo, ko, q, k, AttnGeometry{Grid{Mh, Mw}, P});

  AttnBiasArgs a;
  a.B = B, a.H = H, a.N = N, a.prefix = P, a.Mh = Mh, a.Mw = Mw;
  a.rope = freqs.f32();
  Tensor mine = Tensor::empty(q.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < hd / 2; ++p) {
          const TokenPos pos = token_pos(a, static_cast<int>(b), static_cast<int>(n));
          const double ang = rope_angle(a, hd, static_cast<int>(h), static_cast<int>(p), pos);
          const int64_t i = ((b * H + h) * N + n) * hd + 2 * p;
          mine.at(i) = static_cast<float>(q.at(i) * std::cos(ang) - q.at(i + 1) * std::sin(ang));
          mine.at(i + 1) =
              static_cast<float>(q.at(i) * std::sin(ang) + q.at(i + 1) * std::cos(ang));
        }
  EXPECT_LT(testing::max_rel_error(mine, qo), 1e-5);
  // The test reference agrees too (it is what the GPU tests use).
  EXPECT_LT(testing::max_rel_error(testing::rope_ref(q, freqs, P, Mw), qo), 1e-5);
}

TEST(AttentionTerms, RopeMixedPlanesMatchTheEncoding) {
  const int64_t B = 1, H = 2, hd = 64, Mh = 4, Mw = 3, P = 0, N = Mh * Mw;
  Rng rng(11);
  auto enc = make_attention_encoding(parse_encoding("rope-mixed"), H, hd, Grid{Mh, Mw}, P, rng);
  ASSERT_TRUE(enc);
  Tensor freqs = enc->terms(AttnGeometry{Grid{Mh, Mw}, P}).rotation_freqs;
  ASSERT_EQ(freqs.shape(), (Shape{H, hd / 2, 2}));
  Tensor q = testing::random_tensor(Shape{B, H, N, hd}, 12);
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
  enc->rotate(qo, ko, q, q, AttnGeometry{Grid{Mh, Mw}, P});
  EXPECT_LT(testing::max_rel_error(testing::rope_ref(q, freqs, P, Mw), qo), 1e-5);
}

}  // namespace
}  // namespace vitpe
