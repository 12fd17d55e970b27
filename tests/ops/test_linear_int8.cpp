// linear_int8_forward and its pieces (ops/cpu/linear_int8.cpp) against naive references written
// here from the definitions in ops/ops.h: quantisation in scalar float, products in exact int64,
// the epilogue in double. tests/CMakeLists.txt also runs these tests under
// ONEDNN_MAX_CPU_ISA=AVX2, where oneDNN's u8 x s8 kernels add products in saturating int16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/linear_int8.h"
#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::random_tensor;

// ---- references -------------------------------------------------------------------------------

struct RefRows {
  std::vector<uint8_t> a;  // [M, K]
  std::vector<float> scale;
  std::vector<int32_t> zero;
};

RefRows ref_quantize_rows(const float* x, int64_t m, int64_t k) {
  RefRows r{std::vector<uint8_t>(m * k), std::vector<float>(m), std::vector<int32_t>(m)};
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    float lo = 0, hi = 0;
    for (int64_t j = 0; j < k; ++j) {
      lo = std::min(lo, row[j]);
      hi = std::max(hi, row[j]);
    }
    const float s = hi > lo ? (hi - lo) / 255.0f : 1.0f;
    const float z = std::clamp(std::nearbyint(-lo / s), 0.0f, 255.0f);
    for (int64_t j = 0; j < k; ++j) {
      r.a[i * k + j] =
          static_cast<uint8_t>(std::clamp(std::nearbyint(row[j] / s) + z, 0.0f, 255.0f));
    }
    r.scale[i] = s;
    r.zero[i] = static_cast<int32_t>(z);
  }
  return r;
}

Int8Weights ref_quantize_weights(const Tensor& w) {
  Int8Weights r;
  r.n = w.size(0);
  r.k = w.size(1);
  for (int64_t i = 0; i < r.n; ++i) {
    float amax = 0;
    for (int64_t j = 0; j < r.k; ++j) amax = std::max(amax, std::abs(w.at(i * r.k + j)));
    const float s = amax > 0 ? amax / 63.0f : 1.0f;
    int32_t sum = 0;
    for (int64_t j = 0; j < r.k; ++j) {
      const auto q =
          static_cast<int8_t>(std::clamp(std::nearbyint(w.at(i * r.k + j) / s), -63.0f, 63.0f));
      r.q.push_back(q);
      sum += q;
    }
    r.scale.push_back(s);
    r.sum.push_back(sum);
  }
  return r;
}

// The whole op in exact integers and double:
// y = act(sa sw (a q^T - za sum) + b) * scale + residual.
Tensor ref_linear_int8(const Tensor& x, const Tensor& w, const Tensor& b, Act act,
                       const Tensor& residual, const Tensor& scale = {}) {
  const Int8Weights qw = ref_quantize_weights(w);
  const int64_t k = qw.k, n = qw.n, m = x.numel() / k;
  const RefRows qa = ref_quantize_rows(x.f32(), m, k);
  Tensor y = Tensor::empty(x.shape().with_last(n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += int64_t{qa.a[i * k + l]} * qw.q[j * k + l];
      double v = double{qa.scale[i]} * qw.scale[j] *
                 static_cast<double>(acc - int64_t{qa.zero[i]} * qw.sum[j]);
      if (b.defined()) v += b.at(j);
      if (act == Act::gelu) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      if (act == Act::quick_gelu) v = v / (1.0 + std::exp(-1.702 * v));
      if (scale.defined()) v *= scale.at(j);
      if (residual.defined()) v += residual.at(i * n + j);
      y.at(i * n + j) = static_cast<float>(v);
    }
  }
  return y;
}

std::vector<int32_t> ref_product(const std::vector<uint8_t>& a, const std::vector<int8_t>& q,
                                 int64_t m, int64_t k, int64_t n) {
  std::vector<int32_t> out(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t l = 0; l < k; ++l) s += int64_t{a[i * k + l]} * q[j * k + l];
      out[i * n + j] = static_cast<int32_t>(s);
    }
  }
  return out;
}

// Count of entries where oneDNN's product differs from the exact one.
int64_t product_mismatches(const std::vector<uint8_t>& a, const std::vector<int8_t>& q, int64_t m,
                           int64_t k, int64_t n) {
  std::vector<int32_t> acc(m * n, -1);
  cpu::matmul_u8s8s32(acc.data(), a.data(), q.data(), m, k, n);
  const std::vector<int32_t> want = ref_product(a, q, m, k, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < m * n; ++i) bad += acc[i] != want[i];
  return bad;
}

// ---- quantisation -----------------------------------------------------------------------------

TEST(LinearInt8, WeightsArePerChannelSevenBitWithinHalfAStep) {
  Tensor w = random_tensor(Shape{9, 37}, 1, 0.3);
  for (int64_t j = 0; j < 37; ++j) w.at(4 * 37 + j) = 0.0f;  // a zero channel
  w.at(2 * 37 + 5) = 40.0f;                                  // an outlier in one channel only
  const Int8Weights q = quantize_weights_int8(w);
  const Int8Weights want = ref_quantize_weights(w);
  ASSERT_EQ(q.n, 9);
  ASSERT_EQ(q.k, 37);
  EXPECT_EQ(q.q, want.q);
  EXPECT_EQ(q.scale, want.scale);
  EXPECT_EQ(q.sum, want.sum);
  EXPECT_EQ(q.scale[4], 1.0f);
  for (int64_t i = 0; i < 9; ++i) {
    int32_t sum = 0, peak = 0;
    for (int64_t j = 0; j < 37; ++j) {
      const int32_t v = q.q[i * 37 + j];
      sum += v;
      peak = std::max(peak, std::abs(v));
      EXPECT_LE(std::abs(v), kInt8WeightMax);
      EXPECT_LE(std::abs(q.scale[i] * v - w.at(i * 37 + j)), 0.5f * q.scale[i] * (1 + 1e-6f))
          << "channel " << i << " column " << j;
    }
    EXPECT_EQ(sum, q.sum[i]);
    // Per channel: every non-zero channel uses the full range, the outlier only its own.
    if (i != 4) {
      EXPECT_EQ(peak, kInt8WeightMax) << "channel " << i;
    }
  }
}

TEST(LinearInt8, ActivationsArePerRowU8WithExactZeroWithinHalfAStep) {
  const int64_t k = 37;  // not a multiple of the vector width: the tails run too
  Tensor x = random_tensor(Shape{6, k}, 2);
  for (int64_t j = 0; j < k; ++j) {
    x.at(1 * k + j) = std::abs(x.at(1 * k + j)) + 0.5f;   // all positive: zero point 0
    x.at(2 * k + j) = -std::abs(x.at(2 * k + j)) - 0.5f;  // all negative: zero point 255
    x.at(3 * k + j) = 0.0f;                               // all zero: scale 1
    x.at(4 * k + j) *= 1000.0f;                           // a large row beside small ones
  }
  x.at(5 * k + 3) = 0.0f;
  std::vector<uint8_t> a(6 * k);
  std::vector<float> scale(6);
  std::vector<int32_t> zero(6);
  cpu::quantize_rows_u8(a.data(), scale.data(), zero.data(), x.f32(), 6, k);
  const RefRows want = ref_quantize_rows(x.f32(), 6, k);
  EXPECT_EQ(a, want.a);
  EXPECT_EQ(scale, want.scale);
  EXPECT_EQ(zero, want.zero);
  EXPECT_EQ(zero[1], 0);
  EXPECT_EQ(zero[2], 255);
  EXPECT_EQ(scale[3], 1.0f);
  EXPECT_EQ(a[5 * k + 3], zero[5]) << "0 must be exact";
  for (int64_t i = 0; i < 6; ++i) {
    float lo = 0, hi = 0;
    for (int64_t j = 0; j < k; ++j) {
      lo = std::min(lo, x.at(i * k + j));
      hi = std::max(hi, x.at(i * k + j));
    }
    if (i != 3) {
      EXPECT_FLOAT_EQ(scale[i], (hi - lo) / 255.0f) << "row " << i;
    }
    for (int64_t j = 0; j < k; ++j) {
      const float back = scale[i] * static_cast<float>(a[i * k + j] - zero[i]);
      EXPECT_LE(std::abs(back - x.at(i * k + j)), 0.5f * scale[i] * (1 + 1e-5f))
          << "row " << i << " column " << j;
    }
  }
}

// ---- the integer product ----------------------------------------------------------------------

TEST(LinearInt8, ProductIsExactOnAdversarialInputs) {
  RecordProperty("onednn_isa", cpu_isa_name());
  struct Case {
    int64_t m, k, n;
  };
  for (const Case c :
       {Case{1, 1, 1}, Case{1, 13, 1}, Case{5, 100, 33}, Case{197, 384, 64}, Case{3, 1536, 17}}) {
    const std::vector<uint8_t> full(c.m * c.k, 255);
    // Every pair of products at its extreme: +-255 * 63 * 2 = +-32130, the int16 edge.
    for (const int8_t v : {int8_t{63}, int8_t{-63}}) {
      const std::vector<int8_t> q(c.n * c.k, v);
      EXPECT_EQ(product_mismatches(full, q, c.m, c.k, c.n), 0)
          << "a = 255, q = " << int{v} << ", M " << c.m << " K " << c.k << " N " << c.n << " on "
          << cpu_isa_name();
    }
    std::vector<int8_t> alternating(c.n * c.k);
    for (size_t i = 0; i < alternating.size(); ++i) alternating[i] = (i / 2) % 2 ? -63 : 63;
    EXPECT_EQ(product_mismatches(full, alternating, c.m, c.k, c.n), 0)
        << "alternating pairs, M " << c.m << " K " << c.k << " N " << c.n;
    // Random values over the whole ranges.
    Rng rng(c.m * 7 + c.k);
    std::vector<uint8_t> a(c.m * c.k);
    std::vector<int8_t> q(c.n * c.k);
    for (auto& v : a) v = static_cast<uint8_t>(rng.below(256));
    for (auto& v : q) v = static_cast<int8_t>(static_cast<int64_t>(rng.below(127)) - 63);
    EXPECT_EQ(product_mismatches(a, q, c.m, c.k, c.n), 0)
        << "random, M " << c.m << " K " << c.k << " N " << c.n;
  }
}

TEST(LinearInt8, EightBitWeightsWouldSaturateOnAvx2) {
  // Why the weights have 7 bits: with 8 (|q| up to 127), AVX2's vpmaddubsw saturates the int16
  // sum of a pair, 255 * 127 * 2 = 64770, and the product is wrong.
  if (std::string(cpu_isa_name()) != "avx2") {
    GTEST_SKIP() << "oneDNN runs " << cpu_isa_name()
                 << " here; ctest runs this under ONEDNN_MAX_CPU_ISA=AVX2";
  }
  const std::vector<uint8_t> a(4 * 64, 255);
  EXPECT_GT(product_mismatches(a, std::vector<int8_t>(8 * 64, 127), 4, 64, 8), 0);
  EXPECT_EQ(product_mismatches(a, std::vector<int8_t>(8 * 64, 63), 4, 64, 8), 0);
}

// ---- the whole op -----------------------------------------------------------------------------

struct Int8Case {
  Shape x;  // [..., K]
  int64_t n;
};

void check_int8_forward(const Int8Case& c, Act act, bool bias, bool residual, uint64_t seed) {
  const int64_t k = c.x.dim(-1);
  Tensor x = random_tensor(c.x, seed);
  Tensor w = random_tensor(Shape{c.n, k}, seed + 1, 1.0 / std::sqrt(static_cast<double>(k)));
  Tensor b = bias ? random_tensor(Shape{c.n}, seed + 2) : Tensor();
  Tensor r = residual ? random_tensor(c.x.with_last(c.n), seed + 3) : Tensor();
  Tensor y = Tensor::full(c.x.with_last(c.n), 1e9f);  // garbage the op must overwrite
  linear_int8_forward(y, x, quantize_weights_int8(w), b, act, r);
  EXPECT_LT(max_rel_error(y, ref_linear_int8(x, w, b, act, r)), 2e-6)
      << "x " << c.x.str() << " n " << c.n << " act " << static_cast<int>(act) << " bias " << bias
      << " residual " << residual;
}

TEST(LinearInt8, ForwardMatchesExactReference) {
  check_int8_forward({Shape{1, 197, 384}, 96}, Act::none, true, false, 10);  // a ViT-S token batch
  check_int8_forward({Shape{2, 49, 96}, 288}, Act::none, true, false, 11);   // Swin windows
  check_int8_forward({Shape{1, 1}, 1}, Act::none, true, false, 12);          // M = K = N = 1
  check_int8_forward({Shape{1, 13}, 5}, Act::none, false, false, 13);        // M = 1, K odd
  check_int8_forward({Shape{2, 3, 13}, 1}, Act::none, true, false, 14);      // N = 1
  check_int8_forward({Shape{33, 17}, 65}, Act::none, true, false, 15);       // tails everywhere
}

TEST(LinearInt8, FusedGeluAndResidualMatchReference) {
  check_int8_forward({Shape{2, 17, 40}, 23}, Act::gelu, true, false, 20);
  check_int8_forward({Shape{2, 17, 40}, 23}, Act::none, true, true, 21);
  // GELU before the residual.
  check_int8_forward({Shape{2, 17, 40}, 23}, Act::gelu, false, true, 22);
  check_int8_forward({Shape{1, 7}, 9}, Act::gelu, true, true, 23);
  // CLIP's, then the residual.
  check_int8_forward({Shape{2, 17, 40}, 23}, Act::quick_gelu, true, true, 24);
}

TEST(LinearInt8, TilesSharedOutAmongThreadsMatchReference) {
  // One parallel region: rows quantised, then tiles taken by whichever thread is free, each
  // tile's product on one thread: all rows x 64 columns when the rows are few (several tiles,
  // with and without a narrower last one), 128 rows x all columns when they are many.
  const int threads = num_threads();
  check_int8_forward({Shape{3, 70, 48}, 200}, Act::gelu, true, true, 26);  // 3 blocks and 8 columns
  check_int8_forward({Shape{197, 40}, 128}, Act::none, true, false, 27);   // 2 whole blocks
  check_int8_forward({Shape{400, 33}, 193}, Act::gelu, false, true, 28);   // 3 blocks and 1 column
  // Many rows: tiles of 128 rows and all columns, the last with 54 rows; and of 128 x 64.
  check_int8_forward({Shape{2, 311, 24}, 70}, Act::gelu, true, true, 32);
  check_int8_forward({Shape{640, 16}, 64}, Act::none, true, false, 33);
  EXPECT_EQ(num_threads(), threads) << "the op's region must leave the thread count as it was";
}

TEST(LinearInt8, CallsFromInsideAParallelRegionMatchACallOutside) {
  // Called from the caller's own OpenMP threads, the op runs on each alone; every thread's
  // result equals the one of a call from outside, bit for bit.
  Tensor x = random_tensor(Shape{150, 40}, 29), w = random_tensor(Shape{150, 40}, 30, 0.2);
  Tensor b = random_tensor(Shape{150}, 31);
  const Int8Weights q = quantize_weights_int8(w);
  Tensor want = Tensor::empty(Shape{150, 150});
  linear_int8_forward(want, x, q, b, Act::gelu);
  std::vector<Tensor> ys(4);
  for (auto& y : ys) y = Tensor::full(Shape{150, 150}, 1e9f);
#pragma omp parallel for num_threads(2) schedule(static, 1)
  for (int i = 0; i < 4; ++i) linear_int8_forward(ys[i], x, q, b, Act::gelu);
  for (const Tensor& y : ys) {
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.at(i), want.at(i)) << "element " << i;
  }
}

TEST(LinearInt8, BaselineKernelsMatchReference) {
  // The SSE variants of the row quantisation and the epilogue, which CPUs without AVX2 run.
  cpu::avx2_allowed() = false;
  check_int8_forward({Shape{3, 37}, 21}, Act::gelu, true, true, 24);
  check_int8_forward({Shape{1, 3}, 2}, Act::none, true, false, 25);
  cpu::avx2_allowed() = true;
}

TEST(LinearInt8, ResidualMayBeTheOutputItself) {
  Tensor x = random_tensor(Shape{5, 19}, 30), w = random_tensor(Shape{11, 19}, 31, 0.2);
  Tensor b = random_tensor(Shape{11}, 32), r = random_tensor(Shape{5, 11}, 33);
  Tensor y = r.clone();
  linear_int8_forward(y, x, quantize_weights_int8(w), b, Act::gelu, y);
  EXPECT_LT(max_rel_error(y, ref_linear_int8(x, w, b, Act::gelu, r)), 2e-6);
}

// The per-output scale (layer scale) in the epilogue, after GELU and before the residual (also
// the residual in y itself), on few rows and many, and in the baseline kernels.
TEST(LinearInt8, PerOutputScaleBeforeTheResidual) {
  for (bool avx2 : {true, false}) {
    cpu::avx2_allowed() = avx2;
    for (const Shape& xs : {Shape{1, 197, 40}, Shape{2, 311, 24}, Shape{3, 13}}) {
      const int64_t k = xs.dim(-1), n = 70;
      Tensor x = random_tensor(xs, 50), w = random_tensor(Shape{n, k}, 51, 0.2);
      Tensor b = random_tensor(Shape{n}, 52), gamma = random_tensor(Shape{n}, 53);
      Tensor r = random_tensor(x.shape().with_last(n), 54);
      const Int8Weights q = quantize_weights_int8(w);
      for (Act act : {Act::none, Act::gelu}) {
        Tensor y = Tensor::full(r.shape(), 1e9f);
        linear_int8_forward(y, x, q, b, act, r, gamma);
        EXPECT_LT(max_rel_error(y, ref_linear_int8(x, w, b, act, r, gamma)), 2e-6)
            << xs.str() << " avx2 " << avx2;
        Tensor in_place = r.clone();
        linear_int8_forward(in_place, x, q, b, act, in_place, gamma);
        EXPECT_EQ(testing::max_abs_diff(in_place, y), 0.0) << xs.str() << " avx2 " << avx2;
      }
    }
  }
  cpu::avx2_allowed() = true;
  Tensor x = random_tensor(Shape{2, 8}, 55), y = Tensor::empty(Shape{2, 4});
  const Int8Weights q = quantize_weights_int8(random_tensor(Shape{4, 8}, 56));
  const std::string m = testing::message_of([&] {
    linear_int8_forward(y, x, q, Tensor(), Act::quick_gelu, Tensor(), Tensor::full(Shape{4}, 1.0f));
  });
  EXPECT_NE(m.find("scale"), std::string::npos) << m;
}

TEST(LinearInt8, ErrorAgainstF32IsWithinTheQuantisationBound) {
  // |x w - x^ w^| <= sum_k |x - x^| |w| + |x^| |w - w^| <= sum_k (sa/2 |w| + (|x| + sa/2) sw/2),
  // per output: an independent check of the scales and zero points the op uses.
  const int64_t m = 12, k = 384, n = 40;
  Tensor x = random_tensor(Shape{m, k}, 40);
  for (int64_t j = 0; j < k; ++j) x.at(j) += 3.0f;  // an asymmetric row
  Tensor w = random_tensor(Shape{n, k}, 41, 0.05), b = random_tensor(Shape{n}, 42);
  Tensor y = Tensor::empty(Shape{m, n}), y32 = Tensor::empty(Shape{m, n});
  const Int8Weights q = quantize_weights_int8(w);
  linear_int8_forward(y, x, q, b);
  linear_forward(y32, x, w, b);
  RefRows rows = ref_quantize_rows(x.f32(), m, k);
  double worst = 0;  // the largest error as a fraction of its bound
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double bound = 1e-4;  // f32 rounding of the two products
      for (int64_t l = 0; l < k; ++l) {
        const double sa = rows.scale[i], sw = q.scale[j];
        bound += sa / 2 * std::abs(w.at(j * k + l)) + (std::abs(x.at(i * k + l)) + sa / 2) * sw / 2;
      }
      const double err = std::abs(y.at(i * n + j) - y32.at(i * n + j));
      EXPECT_LE(err, bound) << "row " << i << " column " << j;
      worst = std::max(worst, err / bound);
    }
  }
  EXPECT_GT(worst, 0.0) << "no error at all: the int8 path is not the one running";
}

TEST(LinearInt8, NonFiniteInputPoisonsOnlyItsRow) {
  Tensor x = random_tensor(Shape{3, 20}, 50), w = random_tensor(Shape{7, 20}, 51, 0.2);
  x.at(1 * 20 + 4) = std::numeric_limits<float>::quiet_NaN();
  x.at(2 * 20 + 9) = std::numeric_limits<float>::infinity();
  Tensor y = Tensor::empty(Shape{3, 7});
  linear_int8_forward(y, x, quantize_weights_int8(w), Tensor());
  Tensor want = ref_linear_int8(x.slice(0, 1), w, Tensor(), Act::none, Tensor());
  for (int64_t j = 0; j < 7; ++j) {
    EXPECT_NEAR(y.at(j), want.at(j), 1e-5);
    EXPECT_TRUE(std::isnan(y.at(7 + j))) << "NaN row, column " << j;
    EXPECT_TRUE(std::isnan(y.at(14 + j))) << "infinite row, column " << j;
  }
}

TEST(LinearInt8, RepeatedCallsGiveIdenticalResultsAndReuseThePrimitive) {
  Tensor x = random_tensor(Shape{2, 9, 24}, 60), w = random_tensor(Shape{16, 24}, 61, 0.2);
  const Int8Weights q = quantize_weights_int8(w);
  Tensor y1 = Tensor::empty(Shape{2, 9, 16}), y2 = Tensor::empty(Shape{2, 9, 16});
  linear_int8_forward(y1, x, q, Tensor(), Act::gelu);
  const int64_t entries = cpu::primitive_cache_size();
  linear_int8_forward(y2, x, q, Tensor(), Act::gelu);
  EXPECT_EQ(cpu::primitive_cache_size(), entries);
  for (int64_t i = 0; i < y1.numel(); ++i) ASSERT_EQ(y1.at(i), y2.at(i));
}

TEST(LinearInt8, ErrorsSayWhatWasExpectedAndFound) {
  Tensor x = Tensor::zeros(Shape{4, 3}), w = random_tensor(Shape{2, 3}, 70);
  const Int8Weights q = quantize_weights_int8(w);
  Tensor y = Tensor::empty(Shape{4, 5});
  std::string m = testing::message_of([&] { linear_int8_forward(y, x, q, Tensor()); });
  EXPECT_NE(m.find("linear_int8_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;

  Tensor x4 = Tensor::zeros(Shape{4, 4}), y2 = Tensor::empty(Shape{4, 2});
  m = testing::message_of([&] { linear_int8_forward(y2, x4, q, Tensor()); });
  EXPECT_NE(m.find("[4, 4]"), std::string::npos) << m;
  EXPECT_NE(m.find("K = 3"), std::string::npos) << m;
  EXPECT_THROW(linear_int8_forward(y2, x, q, Tensor::zeros(Shape{3})), ShapeError);

  m = testing::message_of([&] { linear_int8_forward(y2, x, Int8Weights(), Tensor()); });
  EXPECT_NE(m.find("quantize_weights_int8"), std::string::npos) << m;
  Int8Weights cut = q;
  cut.sum.pop_back();
  m = testing::message_of([&] { linear_int8_forward(y2, x, cut, Tensor()); });
  EXPECT_NE(m.find("1 sums"), std::string::npos) << m;

  Tensor sq = Tensor::zeros(Shape{4, 3});
  Int8Weights q33 = quantize_weights_int8(Tensor::zeros(Shape{3, 3}));
  m = testing::message_of([&] { linear_int8_forward(sq, sq, q33, Tensor()); });
  EXPECT_NE(m.find("must not be x"), std::string::npos) << m;

  Tensor bad = random_tensor(Shape{3, 5}, 71);
  bad.at(7) = std::numeric_limits<float>::infinity();
  m = testing::message_of([&] { quantize_weights_int8(bad); });
  EXPECT_NE(m.find("[1, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("finite"), std::string::npos) << m;
  m = testing::message_of([&] { quantize_weights_int8(Tensor::zeros(Shape{4})); });
  EXPECT_NE(m.find("[N, K]"), std::string::npos) << m;
  m = testing::message_of([&] { quantize_weights_int8(Tensor::zeros(Shape{1, 200000})); });
  EXPECT_NE(m.find("200000"), std::string::npos) << m;
  EXPECT_NE(m.find("overflow"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
