// gelu_forward / gelu_backward (and training's pair that keeps the derivative) and add_forward /
// add_backward (ops/cpu/gelu.cpp) against the double reference (ops/reference/elementwise.cpp),
// std::erf pointwise, and central finite differences of a double GELU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cpu/linear_impl.h"
#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

double gelu_d(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

template <class F>
void expect_shape_error(F&& f, const std::string& op, const Shape& a, const Shape& b) {
  try {
    f();
    ADD_FAILURE() << op << ": no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find(a.str()), std::string::npos) << msg;
    EXPECT_NE(msg.find(b.str()), std::string::npos) << msg;
  }
}

TEST(GeluForward, MatchesReference) {
  for (const Shape& s : {Shape{3, 197, 1536}, Shape{1, 49, 384}, Shape{7}, Shape{13, 5}}) {
    Tensor x = random_tensor(s, 1, 2.0);
    Tensor y = Tensor::full(s, 1e9f);
    gelu_forward(y, x);
    EXPECT_LT(max_rel_error(y, ref::gelu(x)), 1e-5) << s.str();
  }
}

// Pointwise relative accuracy on a dense grid, including the negative tail where
// x * (1 + erf(x / sqrt 2)) would cancel: GELU(-5) is ~ -1.4e-6.
TEST(GeluForward, PointwiseRelativeAccuracy) {
  const int64_t n = 20001;
  Tensor x = Tensor::empty(Shape{n});
  for (int64_t i = 0; i < n; ++i) x.at(i) = static_cast<float>(-5.0 + 10.0 * i / (n - 1));
  Tensor y = Tensor::empty(Shape{n});
  gelu_forward(y, x);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = gelu_d(x.at(i));
    if (want == 0) continue;
    worst = std::max(worst, std::fabs(y.at(i) - want) / std::fabs(want));
  }
  EXPECT_LT(worst, 1e-5);
  // Large magnitudes: identity on the right, zero on the left.
  Tensor big = Tensor::from(Shape{4}, {30.0f, 1000.0f, -30.0f, -1000.0f});
  gelu_forward(big, big);  // in place (y aliases x)
  EXPECT_FLOAT_EQ(big.at(0), 30.0f);
  EXPECT_FLOAT_EQ(big.at(1), 1000.0f);
  EXPECT_NEAR(big.at(2), 0.0f, 1e-30);
  EXPECT_NEAR(big.at(3), 0.0f, 1e-30);
}

// The inference linears' GELU (cpu::gelu_rows: the table kernel on AVX-512, gelu_forward's
// kernels elsewhere), every kernel this CPU has, in place, with SIMD tails: relative error under
// 1e-5 on [-7, 7] (the tail included: GELU(-7) is -9e-12), within float rounding of x beyond, 0
// far left, and NaN stays NaN.
TEST(GeluRows, EveryKernelPointwise) {
  const int64_t n = 36001;  // not a multiple of 16: the masked tail runs
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(-9.0 + 18.0 * i / (n - 1));
  struct Kernel {
    const char* name;
    bool avx512, avx2;
  };
  for (const Kernel& k : {Kernel{"avx512", true, true}, Kernel{"avx2", false, true},
                          Kernel{"baseline", false, false}}) {
    cpu::avx512_allowed() = k.avx512;
    cpu::avx2_allowed() = k.avx2;
    std::vector<float> y = x;
    cpu::gelu_rows(y.data(), y.data(), n);
    double worst_near = 0, worst_far = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = gelu_d(x[i]);
      const double err = std::fabs(y[i] - want);
      if (std::fabs(x[i]) <= 7 && want != 0) {
        worst_near = std::max(worst_near, err / std::fabs(want));
      } else {
        worst_far = std::max(worst_far, err / std::max(1.0, std::fabs(static_cast<double>(x[i]))));
      }
    }
    EXPECT_LT(worst_near, 1e-5) << k.name;
    EXPECT_LT(worst_far, 1e-7) << k.name;
    std::vector<float> special = {-1000.0f, 1000.0f, std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(), 0.0f};
    cpu::gelu_rows(special.data(), special.data(), static_cast<int64_t>(special.size()));
    EXPECT_NEAR(special[0], 0.0f, 1e-30) << k.name;
    EXPECT_FLOAT_EQ(special[1], 1000.0f) << k.name;
    EXPECT_EQ(special[2], std::numeric_limits<float>::infinity()) << k.name;
    EXPECT_TRUE(std::isnan(special[3])) << k.name;
    EXPECT_EQ(special[4], 0.0f) << k.name;
  }
  cpu::avx512_allowed() = true;
  cpu::avx2_allowed() = true;
}

TEST(GeluForward, InPlace) {
  Tensor x = random_tensor(Shape{5, 77}, 2, 3.0);
  Tensor want = ref::gelu(x);
  gelu_forward(x, x);
  EXPECT_LT(max_rel_error(x, want), 1e-5);
}

TEST(GeluBackward, MatchesFiniteDifferencesAndAccumulates) {
  Tensor x = random_tensor(Shape{3, 11}, 3, 2.0);
  Tensor w = random_tensor(Shape{3, 11}, 4);
  Tensor num = numeric_grad(x, [&] {
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += gelu_d(x.at(i)) * w.at(i);
    return s;
  });
  Tensor dx = random_tensor(x.shape(), 5);  // backward adds to what is there
  Tensor before = dx.clone();
  gelu_backward(dx, w, x);
  Tensor got = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) got.at(i) = dx.at(i) - before.at(i);
  EXPECT_LT(max_rel_error(got, num), 1e-5);
}

// The SIMD body and the scalar tail must agree with the exact derivative on long rows too.
TEST(GeluBackward, MatchesExactDerivativeOnLargeTensor) {
  Tensor x = random_tensor(Shape{2, 197, 37}, 6, 2.0);
  Tensor dy = random_tensor(x.shape(), 7);
  Tensor dx = Tensor::zeros(x.shape());
  gelu_backward(dx, dy, x);
  Tensor want = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.at(i);
    const double d = 0.5 * std::erfc(-v / std::sqrt(2.0)) +
                     v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * 3.14159265358979323846);
    want.at(i) = static_cast<float>(dy.at(i) * d);
  }
  EXPECT_LT(max_rel_error(dx, want), 1e-5);
}

// The baseline (SSE) kernels, which AVX2 machines never pick by themselves.
TEST(Gelu, BaselineKernelsMatchReference) {
  cpu::avx2_allowed() = false;
  Tensor x = random_tensor(Shape{3, 197, 37}, 30, 2.0);
  Tensor y = Tensor::empty(x.shape());
  gelu_forward(y, x);
  EXPECT_LT(max_rel_error(y, ref::gelu(x)), 1e-5);
  Tensor dy = random_tensor(x.shape(), 31);
  Tensor dx = Tensor::zeros(x.shape()), want = Tensor::zeros(x.shape());
  gelu_backward(dx, dy, x);
  cpu::avx2_allowed() = true;
  gelu_backward(want, dy, x);
  EXPECT_LT(max_rel_error(dx, want), 1e-5);
}

// Training's pair: the forward that keeps GELU's derivative gives gelu_forward's values, and a
// derivative that, multiplied by dy, is gelu_backward's result (checked against finite
// differences above) on the SIMD body, the tails and the baseline kernels; the derivative may
// overwrite x itself.
TEST(GeluWithDerivative, MatchesGeluForwardAndBackward) {
  for (bool avx2 : {true, false}) {
    cpu::avx2_allowed() = avx2;
    for (const Shape& s : {Shape{2, 197, 37}, Shape{7}, Shape{6272, 16}}) {
      Tensor x = random_tensor(s, 40, 2.5), dy = random_tensor(s, 41);
      Tensor y = Tensor::full(s, 1e9f), d = Tensor::full(s, 1e9f);
      gelu_forward_with_derivative(y, d, x);
      Tensor want_y = Tensor::empty(s), want_dx = Tensor::zeros(s);
      gelu_forward(want_y, x);
      gelu_backward(want_dx, dy, x);
      EXPECT_EQ(max_rel_error(y, want_y), 0.0) << s.str() << (avx2 ? " avx2" : " base");
      Tensor dx = Tensor::full(s, std::numeric_limits<float>::quiet_NaN());  // overwritten
      gelu_backward_with_derivative(dx, dy, d);
      EXPECT_LT(max_rel_error(dx, want_dx), 1e-6) << s.str() << (avx2 ? " avx2" : " base");
      // In place: the derivative over x, then dx over dy.
      Tensor x2 = x.clone(), y2 = Tensor::empty(s), dy2 = dy.clone();
      gelu_forward_with_derivative(y2, x2, x2);
      EXPECT_EQ(max_rel_error(y2, y), 0.0) << s.str();
      EXPECT_EQ(max_rel_error(x2, d), 0.0) << s.str();
      gelu_backward_with_derivative(dy2, dy2, x2);
      EXPECT_EQ(max_rel_error(dy2, dx), 0.0) << s.str();
    }
  }
  cpu::avx2_allowed() = true;
}

// With the column sums: dx as without them, and the sums bit for bit linear_backward's bias
// gradient of dx (added to what the tensor holds), with partial runs of rows and SIMD tails,
// AVX2 and SSE, on 1, 2 and 3 threads.
TEST(GeluWithDerivative, ColumnSumsAreLinearBackwardsBiasGradient) {
  const int before = num_threads();
  for (bool avx2 : {true, false}) {
    cpu::avx2_allowed() = avx2;
    for (const Shape& s : {Shape{2, 197, 37}, Shape{6272, 16}, Shape{5, 3}, Shape{1, 0, 4}}) {
      Tensor dy = random_tensor(s, 42), d = random_tensor(s, 43);
      const int64_t n = s.dim(-1), k = 3;
      Tensor want_dx = Tensor::empty(s);
      gelu_backward_with_derivative(want_dx, dy, d);
      Tensor want_db = Tensor::full(Shape{n}, 0.25f), none;
      Tensor x = Tensor::zeros(s.with_last(k)), w = Tensor::zeros(Shape{n, k});
      linear_backward(none, none, want_db, want_dx, x, w);
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        Tensor dx = Tensor::full(s, std::numeric_limits<float>::quiet_NaN());
        Tensor db = Tensor::full(Shape{n}, 0.25f);
        gelu_backward_with_derivative(dx, dy, d, db);
        const std::string what = s.str() + (avx2 ? " avx2 " : " sse ") + std::to_string(threads);
        EXPECT_EQ(max_rel_error(dx, want_dx), 0.0) << what;
        EXPECT_EQ(max_rel_error(db, want_db), 0.0) << what;
      }
    }
  }
  cpu::avx2_allowed() = true;
  set_num_threads(before);
  Tensor a = Tensor::zeros(Shape{4, 6}), wrong = Tensor::zeros(Shape{4});
  expect_shape_error([&] { gelu_backward_with_derivative(a, a, a, wrong); },
                     "gelu_backward_with_derivative", Shape{6}, Shape{4});
}

TEST(GeluWithDerivative, ErrorsNameTheOpAndShapes) {
  Tensor x = Tensor::zeros(Shape{2, 3}), y = Tensor::zeros(Shape{2, 3});
  Tensor bad = Tensor::zeros(Shape{3, 2});
  expect_shape_error([&] { gelu_forward_with_derivative(bad, y, x); },
                     "gelu_forward_with_derivative", Shape{2, 3}, Shape{3, 2});
  expect_shape_error([&] { gelu_forward_with_derivative(y, bad, x); },
                     "gelu_forward_with_derivative", Shape{2, 3}, Shape{3, 2});
  expect_shape_error([&] { gelu_backward_with_derivative(bad, y, x); },
                     "gelu_backward_with_derivative", Shape{2, 3}, Shape{3, 2});
  expect_shape_error([&] { gelu_backward_with_derivative(y, bad, x); },
                     "gelu_backward_with_derivative", Shape{2, 3}, Shape{3, 2});
  // y over x or over the derivative would lose what the other needs.
  EXPECT_THROW(gelu_forward_with_derivative(x, y, x), std::invalid_argument);
  EXPECT_THROW(gelu_forward_with_derivative(y, y, x), std::invalid_argument);
}

TEST(Gelu, ShapeErrorsNameOpAndShapes) {
  Tensor x = Tensor::zeros(Shape{2, 3});
  Tensor y = Tensor::zeros(Shape{3, 2});
  expect_shape_error([&] { gelu_forward(y, x); }, "gelu_forward", Shape{2, 3}, Shape{3, 2});
  Tensor dy = Tensor::zeros(Shape{2, 4});
  Tensor dx = Tensor::zeros(Shape{2, 3});
  expect_shape_error([&] { gelu_backward(dx, dy, x); }, "gelu_backward", Shape{2, 3}, Shape{2, 4});
}

// Phi and phi from one exponential (vec_math.h): Phi relatively accurate in both tails (the
// negative one is where 1 + erf would cancel), in each instance (a float, SSE, AVX2), with the
// limits and NaN kept, and normal_cdf's Phi the same bits.
template <class V>
void normal_cdf_pdf_at(float* cdf, float* pdf, float* cdf_only, const float* x) {
  V v, c, p, c2;
  cpu::load(v, x);
  cpu::normal_cdf_pdf(c, p, v);
  cpu::normal_cdf(c2, v);
  cpu::store(cdf, c);
  cpu::store(pdf, p);
  cpu::store(cdf_only, c2);
}
VITPE_AVX2 void normal_cdf_pdf_avx2(float* cdf, float* pdf, float* cdf_only, const float* x) {
  normal_cdf_pdf_at<cpu::f32x8>(cdf, pdf, cdf_only, x);
}

TEST(NormalCdfPdf, RelativeErrorInBothTails) {
  const int64_t n = 240000;  // a multiple of 8
  std::vector<float> x(n), c(n), p(n), c2(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(-12.0 + 24.0 * i / (n - 1));
  for (int lanes : {1, 4, 8}) {
    if (lanes == 8 && !cpu::cpu_has_avx2_fma()) continue;
    for (int64_t i = 0; i < n; i += lanes) {
      if (lanes == 1) normal_cdf_pdf_at<float>(&c[i], &p[i], &c2[i], &x[i]);
      if (lanes == 4) normal_cdf_pdf_at<cpu::f32x4>(&c[i], &p[i], &c2[i], &x[i]);
      if (lanes == 8) normal_cdf_pdf_avx2(&c[i], &p[i], &c2[i], &x[i]);
    }
    // Negative x: Phi(x), the tail that GELU's negative side multiplies by x, relative to itself.
    // Positive x: Phi(x) itself (its complement is below float's resolution of 1 there).
    double near = 0, far = 0, pdf = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xd = x[i];
      const double want = 0.5 * std::erfc(-xd / std::sqrt(2.0));
      const double rel = std::fabs(c[i] - want) / want;
      if (std::fabs(xd) < 4)
        near = std::max(near, rel);
      else
        far = std::max(far, rel);
      const double want_pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
      pdf = std::max(pdf, std::fabs(p[i] - want_pdf) / want_pdf);
      ASSERT_EQ(c[i], c2[i]) << x[i] << ": normal_cdf differs from normal_cdf_pdf";
    }
    // Beyond |x| = 4 the float rounding of the exponent -x^2 / 2 dominates (as in the reference
    // with x^2 rounded): about x^2 / 2 * 6e-8.
    EXPECT_LT(near, 1e-6) << lanes << " lanes";
    EXPECT_LT(far, 5e-6) << lanes << " lanes";
    EXPECT_LT(pdf, 5e-6) << lanes << " lanes";
    std::printf("%d lanes: Phi within %.2g (|x| < 4) and %.2g (4 <= |x| <= 12), phi within %.2g\n",
                lanes, near, far, pdf);
  }
  const float inf = std::numeric_limits<float>::infinity();
  float edge[4] = {inf, -inf, 1e30f, std::nanf("")}, cdf[4], pdf[4], cdf2[4];
  normal_cdf_pdf_at<cpu::f32x4>(cdf, pdf, cdf2, edge);
  EXPECT_EQ(cdf[0], 1.0f);
  EXPECT_EQ(cdf[1], 0.0f);
  EXPECT_EQ(cdf[2], 1.0f);
  EXPECT_TRUE(std::isnan(cdf[3]));
  EXPECT_LT(pdf[0], 1e-37f);  // the exponential clamps its argument at -87
  EXPECT_TRUE(std::isnan(pdf[3]));
}

// The int8 epilogue's cheaper Phi (vec_math.h): absolute error below 1e-6 everywhere, in each of
// its instances (a float, SSE's four lanes, AVX2's eight), with the limits and NaN kept.
template <class V>
void normal_cdf_fast_at(float* out, const float* x) {
  V v, c;
  cpu::load(v, x);
  cpu::normal_cdf_fast(c, v);
  cpu::store(out, c);
}
VITPE_AVX2 void normal_cdf_fast_avx2(float* out, const float* x) {
  normal_cdf_fast_at<cpu::f32x8>(out, x);
}

TEST(NormalCdfFast, AbsoluteErrorBelowOneMillionth) {
  const int64_t n = 240000;  // a multiple of 8
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(-12.0 + 24.0 * i / (n - 1));
  for (int lanes : {1, 4, 8}) {
    if (lanes == 8 && !cpu::cpu_has_avx2_fma()) continue;
    for (int64_t i = 0; i < n; i += lanes) {
      if (lanes == 1) normal_cdf_fast_at<float>(&y[i], &x[i]);
      if (lanes == 4) normal_cdf_fast_at<cpu::f32x4>(&y[i], &x[i]);
      if (lanes == 8) normal_cdf_fast_avx2(&y[i], &x[i]);
    }
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = 0.5 * std::erfc(-x[i] / std::sqrt(2.0));
      worst = std::max(worst, std::fabs(y[i] - want));
      ASSERT_GE(y[i], 0.0f) << x[i];
      ASSERT_LE(y[i], 1.0f) << x[i];
    }
    EXPECT_LT(worst, 1e-6) << lanes << " lanes";
    EXPECT_GT(worst, 0.0) << "the approximation is not an exact function";
  }
  const float inf = std::numeric_limits<float>::infinity();
  float edge[4] = {inf, -inf, 1e30f, std::nanf("")}, out[4];
  normal_cdf_fast_at<cpu::f32x4>(out, edge);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_TRUE(std::isnan(out[3]));
}

TEST(Add, ForwardBackward) {
  Tensor a = random_tensor(Shape{3, 197, 20}, 8);
  Tensor b = random_tensor(Shape{3, 197, 20}, 9);
  Tensor y = Tensor::empty(a.shape());
  add_forward(y, a, b);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(y.at(i), a.at(i) + b.at(i));
  add_forward(a, a, b);  // aliasing the output with an input
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.at(i), y.at(i));

  // Backward adds dy into both gradients.
  Tensor dy = random_tensor(a.shape(), 10);
  Tensor da = Tensor::full(a.shape(), 1.0f), db = Tensor::full(a.shape(), -2.0f);
  add_backward(da, db, dy);
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(da.at(i), 1.0f + dy.at(i));
    ASSERT_EQ(db.at(i), -2.0f + dy.at(i));
  }
  Tensor none;
  add_backward(none, db, dy);  // an undefined gradient is skipped
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(db.at(i), (-2.0f + dy.at(i)) + dy.at(i));

  Tensor wrong = Tensor::zeros(Shape{3, 197, 21});
  expect_shape_error([&] { add_forward(y, a, wrong); }, "add_forward", Shape{3, 197, 20},
                     Shape{3, 197, 21});
}

// OpenAI CLIP's activation, x sigmoid(1.702 x): against the double reference (also in place and
// in the tails, where the sigmoid saturates), and its backward against finite differences.
TEST(QuickGelu, ForwardMatchesReferenceAndRunsInPlace) {
  for (const Shape& s : {Shape{2, 5, 3000}, Shape{3, 7}, Shape{1}}) {
    const Tensor x = random_tensor(s, 4, 6.0);
    Tensor y = Tensor::full(s, 1e9f);
    quick_gelu_forward(y, x);
    EXPECT_LT(max_rel_error(y, ref::quick_gelu(x)), 1e-6) << s.str();
    Tensor z = x.clone();
    quick_gelu_forward(z, z);
    EXPECT_LT(max_rel_error(z, y), 1e-7) << s.str();
  }
}

TEST(QuickGelu, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({2, 3, 11}, 5, 2.5);
  const Tensor w = random_tensor({2, 3, 11}, 6);
  Tensor dx = Tensor::full(x.shape(), 1e9f);  // overwritten
  quick_gelu_backward(dx, w, x);
  EXPECT_LT(max_rel_error(dx, numeric_grad(x, [&] { return weighted_sum(ref::quick_gelu(x), w); })),
            1e-3);
  Tensor inplace = w.clone();
  quick_gelu_backward(inplace, inplace, x);
  EXPECT_LT(max_rel_error(inplace, dx), 1e-7);
  const Tensor wrong = Tensor::empty({2, 3, 10});
  const std::string m = testing::message_of([&] { quick_gelu_backward(dx, wrong, x); });
  EXPECT_NE(m.find("quick_gelu_backward"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
