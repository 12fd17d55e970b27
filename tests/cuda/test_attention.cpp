// The fused CUDA attention (ops/cuda/attention.cu) against ref::attention (double precision) with
// a dense bias built on the CPU from the same table / slopes / mask / RoPE frequencies. Every
// encoding kind, f32 and bf16, head dims 32/64/128, ViT (N=197 with a class token) and Swin
// (N=49, shifted windows, odd image count) shapes. Random inputs, NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "encodings/tables.h"
#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

struct Case {
  std::string name;
  int64_t B = 2, H = 2, hd = 64;
  int64_t prefix = 0, Mh = 0, Mw = 0;  // N = prefix + Mh*Mw (or N when Mh = 0)
  int64_t N = 0;
  bool dense_bias = false, dense_mask = false, relbias = false, alibi = false;
  int rope = 0;                  // 0 none, 1 axial, 2 mixed (random frequencies)
  int64_t shift = 0, image = 0;  // square image of image x image tokens, shift on both axes
  int64_t tokens() const { return Mh > 0 ? prefix + Mh * Mw : N; }
};

// Runs one case in dtype t and returns the relative error against the reference.
double run_case(const Case& c, DType t, uint64_t seed) {
  const int64_t B = c.B, H = c.H, N = c.tokens(), hd = c.hd;
  const Shape s{B, H, N, hd};
  Tensor q = rounded(testing::random_tensor(s, seed), t);
  Tensor k = rounded(testing::random_tensor(s, seed + 1), t);
  Tensor v = rounded(testing::random_tensor(s, seed + 2), t);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  cuda::AttentionParams p;
  p.scale = static_cast<float>(scale);
  p.terms.prefix = c.prefix;
  p.terms.window_rows = c.Mh;
  p.terms.window_cols = c.Mw;
  Tensor bias, mask;  // what the reference adds
  if (c.dense_bias) {
    Tensor d = testing::random_tensor(Shape{H, N, N}, seed + 3);
    p.bias = d.to(Device::cuda);
    bias = add_tensors(bias, d);
  }
  if (c.dense_mask) {
    const int64_t W = B % 3 == 0 ? 3 : 1;
    Tensor m = testing::random_tensor(Shape{W, N, N}, seed + 4, 2.0);
    p.mask = m.to(Device::cuda);
    mask = add_tensors(mask, m);
  }
  if (c.relbias) {
    const int64_t rows = (2 * c.Mh - 1) * (2 * c.Mw - 1) + (c.prefix > 0 ? 3 : 0);
    Tensor table = testing::random_tensor(Shape{rows, H}, seed + 5);
    p.terms.relative_table = table.to(Device::cuda);
    bias = add_tensors(bias, relbias_dense(table, H, c.prefix, c.Mh, c.Mw));
  }
  if (c.alibi) {
    Tensor slopes = Tensor::empty(Shape{H});
    for (int64_t h = 0; h < H; ++h)
      slopes.at(h) = static_cast<float>(std::pow(2.0, -8.0 * (h + 1) / H));
    p.terms.distance_slopes = slopes.to(Device::cuda);
    bias = add_tensors(bias, alibi_dense(H, c.prefix, c.Mh, c.Mw));
  }
  if (c.shift > 0) {
    p.shift_r = p.shift_c = c.shift;
    p.image_rows = p.image_cols = c.image;
    mask = add_tensors(mask, shift_mask_dense(c.image, c.image, c.Mh, c.Mw, c.shift, c.shift));
  }
  Tensor qr = q, kr = k;
  if (c.rope) {
    Tensor f = c.rope == 1 ? rope_axial_freqs(H, hd, RopeAxialLayout{})
                           : testing::random_tensor(Shape{H, hd / 2, 2}, seed + 6, 0.5);
    p.terms.rotation_freqs = f.to(Device::cuda);
    qr = rope_ref(q, f, c.prefix, c.Mw);
    kr = rope_ref(k, f, c.prefix, c.Mw);
  }
  if (mask.defined() && c.shift > 0 && c.dense_mask) {
    ADD_FAILURE() << "test setup: dense mask and shift mask have different window counts";
  }
  Tensor want = ref::attention(qr, kr, v, static_cast<float>(scale), bias, mask);

  Tensor out = poisoned(s, t);
  cuda::attention_forward(out, upload(q, t), upload(k, t), upload(v, t), p);
  return rel_error(download(out), want);
}

void check(const Case& c) {
  for (DType t : {DType::f32, DType::bf16}) {
    const double err = run_case(c, t, 100 + c.hd);
    EXPECT_LT(err, tol(t)) << c.name << " " << dtype_name(t) << " hd " << c.hd;
  }
}

TEST(CudaAttention, PlainAllHeadDimsAndOddLengths) {
  VITPE_REQUIRE_CUDA();
  for (int64_t hd : {32, 64, 128})
    for (int64_t N : {1, 17, 64, 65, 130}) {
      Case c;
      c.name = "plain N=" + std::to_string(N);
      c.B = 3, c.H = 2, c.hd = hd, c.N = N;
      check(c);
    }
}

TEST(CudaAttention, DenseBiasAndMask) {
  VITPE_REQUIRE_CUDA();
  for (int64_t hd : {32, 64, 128}) {
    Case c;
    c.name = "dense bias + mask";
    c.B = 3, c.H = 2, c.hd = hd, c.N = 77;
    c.dense_bias = c.dense_mask = true;
    check(c);
  }
}

TEST(CudaAttention, VitRelbiasWithClassToken) {
  VITPE_REQUIRE_CUDA();
  // ViT-B/16 at 224: 1 + 14x14 tokens, head dim 64; odd batch.
  Case c;
  c.name = "ViT relbias";
  c.B = 3, c.H = 3, c.hd = 64, c.prefix = 1, c.Mh = 14, c.Mw = 14, c.relbias = true;
  check(c);
}

TEST(CudaAttention, RelbiasAllHeadDimsNonSquare) {
  VITPE_REQUIRE_CUDA();
  for (int64_t hd : {32, 64, 128}) {
    Case c;
    c.name = "relbias 6x11";
    c.B = 1, c.H = 2, c.hd = hd, c.prefix = 1, c.Mh = 6, c.Mw = 11, c.relbias = true;
    check(c);
  }
}

TEST(CudaAttention, SwinShiftedWindowsWithRelbias) {
  VITPE_REQUIRE_CUDA();
  // Swin-T stage 1 geometry scaled down: 14x14 tokens, window 7, shift 3 -> 4 windows per image,
  // 3 images (odd) -> 12 batch entries; head dim 32 as Swin-T.
  for (int64_t hd : {32, 64, 128}) {
    Case c;
    c.name = "Swin shifted";
    c.B = 12, c.H = 3, c.hd = hd, c.Mh = 7, c.Mw = 7, c.relbias = true;
    c.shift = 3, c.image = 14;
    check(c);
  }
}

TEST(CudaAttention, SwinUnshiftedWindows) {
  VITPE_REQUIRE_CUDA();
  Case c;
  c.name = "Swin unshifted";
  c.B = 5, c.H = 3, c.hd = 32, c.Mh = 7, c.Mw = 7, c.relbias = true;
  check(c);
}

TEST(CudaAttention, Alibi2d) {
  VITPE_REQUIRE_CUDA();
  for (int64_t hd : {32, 64, 128}) {
    Case c;
    c.name = "alibi2d";
    c.B = 3, c.H = 4, c.hd = hd, c.prefix = 1, c.Mh = 9, c.Mw = 7, c.alibi = true;
    check(c);
  }
}

TEST(CudaAttention, RopeAxialAndMixed) {
  VITPE_REQUIRE_CUDA();
  for (int rope : {1, 2})
    for (int64_t hd : {32, 64, 128}) {
      Case c;
      c.name = rope == 1 ? "rope-axial" : "rope-mixed";
      c.B = 3, c.H = 2, c.hd = hd, c.prefix = 1, c.Mh = 10, c.Mw = 10, c.rope = rope;
      check(c);
    }
}

TEST(CudaAttention, RopeWithRelbiasOnShiftedWindows) {
  VITPE_REQUIRE_CUDA();
  Case c;
  c.name = "rope + relbias + shift";
  c.B = 4, c.H = 2, c.hd = 32, c.Mh = 7, c.Mw = 7, c.relbias = true, c.rope = 2;
  c.shift = 3, c.image = 14;
  check(c);
}

TEST(CudaAttention, RejectsBadArguments) {
  VITPE_REQUIRE_CUDA();
  const Shape s{2, 2, 10, 64};
  Tensor q = upload(testing::random_tensor(s, 1), DType::f32);
  Tensor out = Tensor::empty(s, DType::f32, Device::cuda);
  cuda::AttentionParams p;
  // head dim 48 is not supported
  Tensor q48 = Tensor::empty(Shape{2, 2, 10, 48}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::attention_forward(q48, q48.clone(), q48.clone(), q48.clone(), p), ShapeError);
  // relbias without a geometry
  p.terms.relative_table = Tensor::zeros(Shape{9, 2}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::attention_forward(out, q, q, q, p), ShapeError);
  // wrong table size for a 3x3 window + 1 prefix (needs 25 + 3 rows)
  p.terms.prefix = 1, p.terms.window_rows = 3, p.terms.window_cols = 3;
  EXPECT_THROW(cuda::attention_forward(out, q, q, q, p), ShapeError);
  // out overlapping q
  cuda::AttentionParams plain;
  EXPECT_THROW(cuda::attention_forward(q, q, q, q, plain), std::invalid_argument);
  // CPU tensors
  Tensor qc = testing::random_tensor(s, 2);
  EXPECT_THROW(cuda::attention_forward(out, qc, q, q, plain), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
