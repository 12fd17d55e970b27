// softmax_forward / softmax_backward (ops/cpu/softmax.cpp) against the double reference
// (ops/reference/softmax.cpp) and central finite differences of a double softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;

TEST(SoftmaxForward, MatchesReference) {
  // Row lengths around the SIMD widths (tails), attention rows and a classifier row.
  for (const Shape& s : {Shape{3, 6, 197, 197}, Shape{4, 1000}, Shape{5, 7}, Shape{9, 8},
                         Shape{2, 1}, Shape{3, 49, 49}}) {
    Tensor x = random_tensor(s, 1, 3.0);
    Tensor y = Tensor::full(s, 1e9f);
    softmax_forward(y, x);
    EXPECT_LT(max_rel_error(y, ref::softmax(x)), 1e-5) << s.str();
  }
}

TEST(SoftmaxForward, StableForLargeLogitsAndInPlace) {
  Tensor x = random_tensor(Shape{4, 33}, 2, 300.0);  // exp would overflow without the shift
  x.at(5) = -1e30f;                                  // a masked-out entry
  Tensor want = ref::softmax(x);
  softmax_forward(x, x);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_TRUE(std::isfinite(x.at(i)));
  EXPECT_LT(max_rel_error(x, want), 1e-5);
  EXPECT_LT(x.at(5), 1e-30f);
}

// Entries ~87 or more under their row's maximum come out as 0, not as subnormals, on the
// AVX2 and the baseline kernels (vector body and tail): rows of 1 to 40 with a -100 entry and
// up to 39 entries that tie with the maximum (a sum up to 39, so exp(-87) / sum is subnormal).
TEST(SoftmaxForward, FarBelowTheMaximumIsZeroNotSubnormal) {
  for (bool avx2 : {true, false}) {
    cpu::avx2_allowed() = avx2;
    for (int64_t c = 2; c <= 40; ++c) {
      Tensor x = Tensor::full(Shape{2, c}, 3.0f);
      x.at(c - 1) = 3.0f - 100.0f;  // the last entry: the tail on the vector kernels
      x.at(c) = 3.0f - 88.0f;       // the first of the second row
      Tensor y = Tensor::empty(x.shape());
      softmax_forward(y, x);
      for (int64_t i = 0; i < y.numel(); ++i) {
        ASSERT_NE(std::fpclassify(y.at(i)), FP_SUBNORMAL) << "c " << c << " i " << i;
      }
      EXPECT_EQ(y.at(c - 1), 0.0f) << c;
      EXPECT_EQ(y.at(c), 0.0f) << c;
      EXPECT_LT(max_rel_error(y, ref::softmax(x)), 1e-5) << c;
    }
  }
  cpu::avx2_allowed() = true;
}

// vitpe's own kernels follow oneDNN's ISA cap (ctest own_kernels_avx2_cap runs this under
// ONEDNN_MAX_CPU_ISA=AVX2): an AVX2 cap on an AVX-512 machine runs the AVX2 kernels.
TEST(OwnKernels, FollowOneDnnIsaCap) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string c = cap ? cap : "";
  if (c == "AVX2") {
    EXPECT_EQ(cpu::own_isa_cap_bits(), 256);
    EXPECT_FALSE(cpu::cpu_has_avx512());
    EXPECT_EQ(cpu::cpu_has_avx2_fma(), avx2);
  } else if (c.empty()) {
    EXPECT_EQ(cpu::own_isa_cap_bits(), 512);
    EXPECT_EQ(cpu::cpu_has_avx512(), avx512);
    EXPECT_EQ(cpu::cpu_has_avx2_fma(), avx2);
  } else {
    GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA=" << c << " (this test checks none and AVX2)";
  }
}

TEST(SoftmaxBackward, MatchesFiniteDifferencesAndAccumulates) {
  const int64_t rows = 3, c = 11;
  Tensor x = random_tensor(Shape{rows, c}, 3);
  Tensor w = random_tensor(Shape{rows, c}, 4);
  auto loss = [&] {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < c; ++i) mx = std::max(mx, static_cast<double>(x.at(r * c + i)));
      for (int64_t i = 0; i < c; ++i) sum += std::exp(x.at(r * c + i) - mx);
      for (int64_t i = 0; i < c; ++i) s += std::exp(x.at(r * c + i) - mx) / sum * w.at(r * c + i);
    }
    return s;
  };
  Tensor num = numeric_grad(x, loss);
  Tensor y = Tensor::empty(x.shape());
  softmax_forward(y, x);
  Tensor dx = Tensor::full(x.shape(), 0.5f);
  softmax_backward(dx, w, y);
  Tensor got = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) got.at(i) = dx.at(i) - 0.5f;
  EXPECT_LT(max_rel_error(got, num), 1e-5);
}

// The baseline (SSE) kernels, which AVX2 machines never pick by themselves.
TEST(Softmax, BaselineKernelsMatchReference) {
  cpu::avx2_allowed() = false;
  Tensor x = random_tensor(Shape{6, 197}, 5, 3.0);
  Tensor y = Tensor::empty(x.shape());
  softmax_forward(y, x);
  cpu::avx2_allowed() = true;
  EXPECT_LT(max_rel_error(y, ref::softmax(x)), 1e-5);
}

TEST(Softmax, ShapeErrorsNameOpAndShapes) {
  Tensor x = Tensor::zeros(Shape{2, 5});
  Tensor y = Tensor::zeros(Shape{2, 6});
  try {
    softmax_forward(y, x);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("softmax_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 5]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 6]"), std::string::npos) << msg;
  }
  Tensor dx = Tensor::zeros(Shape{2, 5});
  EXPECT_THROW(softmax_backward(dx, y, x), ShapeError);
}

}  // namespace
}  // namespace vitpe
