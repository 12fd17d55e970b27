// linear_forward / linear_backward (ops/cpu/linear.cpp) against the double-precision
// reference (ops/reference/linear.cpp) and against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ops/cpu/dnnl_cache.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::random_tensor;

struct LinearCase {
  Shape x;  // [..., K]
  int64_t n;
};

Shape out_shape(const Shape& x, int64_t n) {
  Shape s = x;
  s[s.size() - 1] = n;
  return s;
}

void check_linear_forward(const LinearCase& c, Act act, bool bias, bool residual, uint64_t seed) {
  const int64_t k = c.x.dim(-1);
  Tensor x = random_tensor(c.x, seed);
  Tensor w = random_tensor(Shape{c.n, k}, seed + 1, 1.0 / std::sqrt(static_cast<double>(k)));
  Tensor b = bias ? random_tensor(Shape{c.n}, seed + 2) : Tensor();
  Tensor r = residual ? random_tensor(out_shape(c.x, c.n), seed + 3) : Tensor();
  Tensor y = Tensor::full(out_shape(c.x, c.n), 1e9f);  // garbage the op must overwrite
  linear_forward(y, x, w, b, act, r);
  Tensor want = ref::linear(x, w, b, act, r);
  EXPECT_LT(max_rel_error(y, want), 1e-5)
      << "x " << c.x.str() << " n " << c.n << " act " << static_cast<int>(act) << " bias " << bias
      << " residual " << residual;
}

TEST(LinearForward, MatchesReferenceOnViTShapes) {
  check_linear_forward({Shape{1, 197, 384}, 1152}, Act::none, true, false, 1);  // qkv, batch 1
  check_linear_forward({Shape{3, 197, 1536}, 384}, Act::none, true, false, 2);  // fc2, batch 3
  check_linear_forward({Shape{1, 49, 384}, 384}, Act::none, true, false, 3);    // a Swin window
}

TEST(LinearForward, MatchesReferenceOnOddShapes) {
  check_linear_forward({Shape{7, 13}, 5}, Act::none, true, false, 4);
  check_linear_forward({Shape{2, 3, 13}, 5}, Act::none, false, false, 5);
  check_linear_forward({Shape{1, 1}, 1}, Act::none, true, false, 6);
  check_linear_forward({Shape{33, 17}, 65}, Act::none, true, false, 7);
}

TEST(LinearForward, FusedGeluMatchesReference) {
  check_linear_forward({Shape{1, 197, 384}, 1536}, Act::gelu, true, false, 8);  // fc1
  check_linear_forward({Shape{7, 13}, 5}, Act::gelu, false, false, 9);
}

// OpenAI CLIP's quick_gelu (oneDNN's swish with alpha 1.702), before the residual too.
TEST(LinearForward, FusedQuickGeluMatchesReference) {
  check_linear_forward({Shape{1, 50, 96}, 384}, Act::quick_gelu, true, false, 40);
  check_linear_forward({Shape{7, 13}, 5}, Act::quick_gelu, false, true, 41);
}

TEST(LinearForward, FusedResidualMatchesReference) {
  check_linear_forward({Shape{1, 197, 384}, 384}, Act::none, true, true, 10);  // proj + residual
  check_linear_forward({Shape{7, 13}, 5}, Act::none, false, true, 11);
}

TEST(LinearForward, GeluIsAppliedBeforeTheResidual) {
  check_linear_forward({Shape{2, 9, 31}, 17}, Act::gelu, true, true, 12);
  // With x = 0 and no bias the product is 0, GELU(0) = 0, and y must equal the residual;
  // GELU applied after the add would give GELU(residual) instead.
  Tensor x = Tensor::zeros(Shape{3, 4});
  Tensor w = random_tensor(Shape{5, 4}, 13);
  Tensor r = Tensor::from(Shape{3, 5}, {-3, -2, -1, 0, 1, 2, 3, -0.5f, 0.5f, 4, 5, 6, 7, 8, 9});
  Tensor y = Tensor::empty(Shape{3, 5});
  linear_forward(y, x, w, Tensor(), Act::gelu, r);
  for (int i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(y.at(i), r.at(i)) << i;
}

TEST(LinearForward, ResidualMayBeTheOutputItself) {
  // y = y + x w^T + b (the in-place residual of a transformer block).
  Tensor x = random_tensor(Shape{2, 11, 24}, 14);
  Tensor w = random_tensor(Shape{24, 24}, 15, 0.2);
  Tensor b = random_tensor(Shape{24}, 16);
  Tensor r = random_tensor(Shape{2, 11, 24}, 17);
  for (Act act : {Act::none, Act::gelu}) {
    Tensor y = r.clone();
    linear_forward(y, x, w, b, act, y);
    EXPECT_LT(max_rel_error(y, ref::linear(x, w, b, act, r)), 1e-5);
  }
}

TEST(LinearForward, RepeatedCallsGiveIdenticalResultsAndReuseThePrimitive) {
  Tensor x = random_tensor(Shape{5, 19}, 18);
  Tensor w = random_tensor(Shape{23, 19}, 19);
  Tensor b = random_tensor(Shape{23}, 20);
  Tensor y1 = Tensor::empty(Shape{5, 23}), y2 = Tensor::empty(Shape{5, 23});
  linear_forward(y1, x, w, b, Act::gelu);
  const int64_t entries = cpu::primitive_cache_size();
  linear_forward(y2, x, w, b, Act::gelu);
  EXPECT_EQ(cpu::primitive_cache_size(), entries);
  for (int64_t i = 0; i < y1.numel(); ++i) EXPECT_EQ(y1.at(i), y2.at(i));
}

TEST(LinearForward, ConcurrentCallersGetTheirOwnResults) {
  // Threads share one cached primitive per shape; each must see its own data.
  constexpr int kThreads = 4;
  Tensor w = random_tensor(Shape{40, 24}, 40, 0.2);
  Tensor b = random_tensor(Shape{40}, 41);
  std::vector<Tensor> xs, ys, wants;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(random_tensor(Shape{3, 31, 24}, 42 + t));
    ys.push_back(Tensor::empty(Shape{3, 31, 40}));
    wants.push_back(ref::linear(xs[t], w, b, Act::gelu));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) linear_forward(ys[t], xs[t], w, b, Act::gelu);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_LT(max_rel_error(ys[t], wants[t]), 1e-5) << t;
}

// Weights packed once for the CPU's matmul give the plain weights' values bit for bit: the
// matmul packs plain weights into the same layout on every call. Where it prefers an unblocked
// layout (AVX2's gemm:jit: the ctest linear_packed_avx2 runs these there) nothing is packed.
TEST(LinearPacked, SameBitsAsThePlainWeights) {
  struct Case {
    Shape x;
    int64_t n;
  };
  const bool avx512 = std::string(cpu_isa_name()).find("avx512") != std::string::npos;
  for (const Case& c :
       {Case{Shape{1, 197, 384}, 1152}, Case{Shape{2, 197, 1536}, 384}, Case{Shape{5, 768}, 1000},
        Case{Shape{33, 17}, 65}, Case{Shape{1, 1}, 1}, Case{Shape{3, 49, 96}, 288}}) {
    const int64_t k = c.x.dim(-1);
    Tensor x = random_tensor(c.x, 60), w = random_tensor(Shape{c.n, k}, 61, 0.1);
    Tensor b = random_tensor(Shape{c.n}, 62), r = random_tensor(out_shape(c.x, c.n), 63);
    const PackedWeights p = pack_weights(w);
    EXPECT_EQ(p.plain.raw(), w.raw()) << "the plain weights are shared, not copied";
    EXPECT_EQ(p.packed(), avx512) << cpu_isa_name() << " " << c.x.str() << " n " << c.n;
    if (p.packed()) {
      EXPECT_GE(p.data.nbytes(), w.nbytes()) << c.x.str();
    }
    for (Act act : {Act::none, Act::gelu, Act::quick_gelu}) {
      for (int variant = 0; variant < 4; ++variant) {
        // bias, no bias, a residual read from r, a residual that is y itself
        const Tensor bias = variant == 1 ? Tensor() : b;
        const Tensor res = variant == 2 ? r : Tensor();
        Tensor want = variant == 3 ? r.clone() : Tensor::full(out_shape(c.x, c.n), 1e9f);
        Tensor got = variant == 3 ? r.clone() : Tensor::full(out_shape(c.x, c.n), 1e9f);
        linear_forward(want, x, w, bias, act, variant == 3 ? want : res);
        linear_forward(got, x, p, bias, act, variant == 3 ? got : res);
        EXPECT_EQ(testing::max_abs_diff(got, want), 0.0)
            << c.x.str() << " n " << c.n << " act " << static_cast<int>(act) << " variant "
            << variant;
      }
    }
    // Under FixedWorkSplit (blocks of rows, each on one thread) too, and against the reference.
    const FixedWorkSplit fixed;
    Tensor want = Tensor::empty(out_shape(c.x, c.n)), got = Tensor::empty(out_shape(c.x, c.n));
    linear_forward(want, x, w, b, Act::gelu, r);
    linear_forward(got, x, p, b, Act::gelu, r);
    EXPECT_EQ(testing::max_abs_diff(got, want), 0.0) << "FixedWorkSplit " << c.x.str();
    EXPECT_LT(max_rel_error(got, ref::linear(x, w, b, Act::gelu, r)), 1e-5) << c.x.str();
  }
}

// y = act(x w^T + b) * scale + residual: the per-output scale (layer scale) in the matmul's
// epilogue, against the reference product scaled and added in double, on plain and packed
// weights, under FixedWorkSplit, with bf16 weights, and with the residual in y itself.
TEST(LinearForward, PerOutputScaleBeforeTheResidual) {
  struct Case {
    Shape x;
    int64_t n;
  };
  for (const Case& c : {Case{Shape{1, 197, 384}, 384}, Case{Shape{2, 17, 40}, 23},
                        Case{Shape{1, 5}, 1}, Case{Shape{33, 17}, 65}}) {
    const int64_t k = c.x.dim(-1);
    const Shape ys = out_shape(c.x, c.n);
    Tensor x = random_tensor(c.x, 70), w = random_tensor(Shape{c.n, k}, 71, 0.2);
    Tensor b = random_tensor(Shape{c.n}, 72), r = random_tensor(ys, 73);
    Tensor gamma = random_tensor(Shape{c.n}, 74);
    const PackedWeights packed = pack_weights(w);
    for (Act act : {Act::none, Act::gelu}) {
      for (bool with_residual : {false, true}) {
        const Tensor product = ref::linear(x, w, b, act);
        Tensor want = Tensor::empty(ys);
        for (int64_t i = 0; i < want.numel(); ++i) {
          const double v = static_cast<double>(product.at(i)) * gamma.at(i % c.n);
          want.at(i) = static_cast<float>(with_residual ? v + r.at(i) : v);
        }
        const std::string what = c.x.str() + " n " + std::to_string(c.n) + " act " +
                                 std::to_string(static_cast<int>(act)) + " residual " +
                                 std::to_string(with_residual);
        const Tensor res = with_residual ? r : Tensor();
        for (int variant = 0; variant < 4; ++variant) {
          // plain, packed, plain under FixedWorkSplit, the residual in y itself
          Tensor y = variant == 3 && with_residual ? r.clone() : Tensor::full(ys, 1e9f);
          const Tensor& rr = variant == 3 && with_residual ? y : res;
          if (variant == 1) {
            linear_forward(y, x, packed, b, act, rr, gamma);
          } else if (variant == 2) {
            const FixedWorkSplit fixed;
            linear_forward(y, x, w, b, act, rr, gamma);
          } else {
            linear_forward(y, x, w, b, act, rr, gamma);
          }
          EXPECT_LT(max_rel_error(y, want), 1e-5) << what << " variant " << variant;
        }
        if (cpu_has_bf16()) {
          // bf16 weights: against the same op without the scale, scaled and added here.
          const Tensor wb = w.to(DType::bf16);
          Tensor plain = Tensor::empty(ys), y = Tensor::full(ys, 1e9f);
          linear_forward(plain, x, wb, b, act);
          linear_forward(y, x, wb, b, act, res, gamma);
          for (int64_t i = 0; i < y.numel(); ++i) {
            const float v = plain.at(i) * gamma.at(i % c.n);
            ASSERT_NEAR(y.at(i), with_residual ? v + r.at(i) : v, 1e-5f * (1 + std::fabs(v)))
                << what << " bf16 element " << i;
          }
        }
      }
    }
  }
  Tensor x = Tensor::zeros(Shape{2, 4}), w = Tensor::zeros(Shape{3, 4}),
         y = Tensor::empty(Shape{2, 3});
  const std::string m = testing::message_of(
      [&] { linear_forward(y, x, w, Tensor(), Act::none, Tensor(), Tensor::zeros(Shape{4})); });
  EXPECT_NE(m.find("scale"), std::string::npos) << m;
  EXPECT_NE(m.find("[3]"), std::string::npos) << m;
}

TEST(LinearPacked, ErrorsNameTheProblem) {
  auto expect = [](const std::function<void()>& f, const std::string& a, const std::string& b) {
    const std::string m = testing::message_of(f);
    EXPECT_NE(m.find(a), std::string::npos) << m;
    EXPECT_NE(m.find(b), std::string::npos) << m;
  };
  expect([] { pack_weights(Tensor::zeros(Shape{6})); }, "pack_weights", "[N, K]");
  expect([] { pack_weights(Tensor::zeros(Shape{0, 4})); }, "[N, K] with N, K > 0", "[0, 4]");
  expect([] { pack_weights(Tensor::zeros(Shape{3, 4}).to(DType::bf16)); }, "f32", "bf16");
  const PackedWeights p = pack_weights(random_tensor(Shape{5, 4}, 64));
  Tensor x = Tensor::zeros(Shape{2, 3}), y = Tensor::empty(Shape{2, 5});
  expect([&] { linear_forward(y, x, p, Tensor()); }, "[2, 3]", "K = 4");
  Tensor x4 = Tensor::zeros(Shape{2, 4});
  expect([&] { linear_forward(y, x4, PackedWeights(), Tensor()); }, "linear_forward",
         "pack_weights");
  Tensor y6 = Tensor::empty(Shape{2, 6});
  expect([&] { linear_forward(y6, x4, p, Tensor()); }, "[2, 5]", "[2, 6]");
}

// Gradients of L = sum(g * y) with y = linear(x, w, b): from the backward and from central
// differences of L computed in double.
TEST(LinearBackward, MatchesFiniteDifferences) {
  const int64_t m = 4, k = 6, n = 5;
  Tensor x = random_tensor(Shape{2, 2, k}, 21);
  Tensor w = random_tensor(Shape{n, k}, 22);
  Tensor b = random_tensor(Shape{n}, 23);
  Tensor g = random_tensor(Shape{2, 2, n}, 24);
  auto loss = [&]() {
    double s = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double v = b.at(j);
        for (int64_t l = 0; l < k; ++l) v += static_cast<double>(x.at(i * k + l)) * w.at(j * k + l);
        s += v * g.at(i * n + j);
      }
    return s;
  };
  Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape()),
         db = Tensor::zeros(b.shape());
  linear_backward(dx, dw, db, g, x, w);
  EXPECT_LT(max_rel_error(dx, testing::numeric_grad(x, loss)), 1e-4);
  EXPECT_LT(max_rel_error(dw, testing::numeric_grad(w, loss)), 1e-4);
  EXPECT_LT(max_rel_error(db, testing::numeric_grad(b, loss)), 1e-4);
}

TEST(LinearBackward, MatchesReferenceOnViTShapes) {
  for (auto [xs, n] :
       {std::pair{Shape{1, 197, 384}, int64_t{1152}}, std::pair{Shape{1, 49, 96}, int64_t{384}},
        std::pair{Shape{7, 13}, int64_t{5}}}) {
    const int64_t k = xs.dim(-1);
    Tensor x = random_tensor(xs, 25), w = random_tensor(Shape{n, k}, 26, 0.05);
    Tensor dy = random_tensor(out_shape(xs, n), 27);
    Tensor dx = Tensor::zeros(xs), dw = Tensor::zeros(w.shape()), db = Tensor::zeros(Shape{n});
    linear_backward(dx, dw, db, dy, x, w);
    ref::LinearGrads want = ref::linear_backward(dy, x, w);
    EXPECT_LT(max_rel_error(dx, want.dx), 1e-5) << xs.str();
    EXPECT_LT(max_rel_error(dw, want.dw), 1e-5) << xs.str();
    EXPECT_LT(max_rel_error(db, want.db), 1e-5) << xs.str();
  }
}

TEST(LinearBackward, AccumulatesIntoGradients) {
  Tensor x = random_tensor(Shape{9, 14}, 28), w = random_tensor(Shape{6, 14}, 29);
  Tensor dy = random_tensor(Shape{9, 6}, 30);
  ref::LinearGrads once = ref::linear_backward(dy, x, w);
  Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape()), db = Tensor::zeros(Shape{6});
  linear_backward(dx, dw, db, dy, x, w);
  linear_backward(dx, dw, db, dy, x, w);
  auto twice = [](const Tensor& t) {
    Tensor r = t.clone();
    for (int64_t i = 0; i < r.numel(); ++i) r.at(i) *= 2;
    return r;
  };
  EXPECT_LT(max_rel_error(dx, twice(once.dx)), 1e-5);
  EXPECT_LT(max_rel_error(dw, twice(once.dw)), 1e-5);
  EXPECT_LT(max_rel_error(db, twice(once.db)), 1e-5);
}

// GradWrite::overwrite: dx is written whatever it held (garbage here); dw and db still add.
TEST(LinearBackward, OverwritesDxAndStillAccumulatesTheParameters) {
  Tensor x = random_tensor(Shape{2, 5, 12}, 34), w = random_tensor(Shape{7, 12}, 35);
  Tensor dy = random_tensor(Shape{2, 5, 7}, 36);
  ref::LinearGrads once = ref::linear_backward(dy, x, w);
  Tensor dx = Tensor::full(x.shape(), 1e9f);
  Tensor dw = once.dw.clone(), db = once.db.clone();
  linear_backward(dx, dw, db, dy, x, w, GradWrite::overwrite);
  auto twice = [](const Tensor& t) {
    Tensor r = t.clone();
    for (int64_t i = 0; i < r.numel(); ++i) r.at(i) *= 2;
    return r;
  };
  EXPECT_LT(max_rel_error(dx, once.dx), 1e-5);
  EXPECT_LT(max_rel_error(dw, twice(once.dw)), 1e-5);
  EXPECT_LT(max_rel_error(db, twice(once.db)), 1e-5);
  Tensor no_dw, no_db;
  dx.fill(-3.0f);
  linear_backward(dx, no_dw, no_db, dy, x, w, GradWrite::overwrite);
  EXPECT_LT(max_rel_error(dx, once.dx), 1e-5);
}

TEST(LinearBackward, UndefinedGradientsAreSkipped) {
  Tensor x = random_tensor(Shape{4, 3}, 31), w = random_tensor(Shape{2, 3}, 32);
  Tensor dy = random_tensor(Shape{4, 2}, 33);
  ref::LinearGrads want = ref::linear_backward(dy, x, w);
  Tensor none, dw = Tensor::zeros(w.shape());
  Tensor none2;
  linear_backward(none, dw, none2, dy, x, w);
  EXPECT_LT(max_rel_error(dw, want.dw), 1e-5);
  Tensor dx = Tensor::zeros(x.shape());
  linear_backward(dx, none, none2, dy, x, w);
  EXPECT_LT(max_rel_error(dx, want.dx), 1e-5);
}

// Under FixedWorkSplit (training) forward and backward give the same bits on 1, 2 and 3 threads,
// and the reference's values: the training shapes of the quick study (D 64: batch 50 x 17 tokens;
// qkv, proj, fc1, fc2, the head), of D 128 and of vit-fmnist (128 x 49 tokens), weight gradients
// of several output tiles with partial last ones (200 x 300), a long thin one (many rows, a small
// output: its sum over rows is cut into chunks) and a tiny one; the forward with its bias, GELU
// and residual post-ops (a residual that is y itself too). Without the scope oneDNN splits by
// the thread count: on AVX2 (ctest's fixed_split_avx2 runs this there) the D 64 weight gradients
// and inputs' gradients differed on 2 threads, and most shapes on 3.
TEST(LinearBackward, SameBitsOnAnyThreadCountUnderFixedWorkSplit) {
  const int before = num_threads();
  const FixedWorkSplit fixed;
  struct Case {
    int64_t m, k, n;
  };
  for (const Case& c :
       {Case{850, 64, 192}, Case{850, 64, 64}, Case{850, 64, 128}, Case{850, 128, 64},
        Case{50, 64, 4}, Case{850, 128, 384}, Case{850, 256, 128}, Case{6272, 128, 384},
        Case{6272, 512, 128}, Case{1000, 300, 200}, Case{20000, 16, 8}, Case{3, 5, 7}}) {
    Tensor x = random_tensor(Shape{c.m, c.k}, 90), w = random_tensor(Shape{c.n, c.k}, 91, 0.1);
    Tensor b = random_tensor(Shape{c.n}, 92), dy = random_tensor(Shape{c.m, c.n}, 93);
    Tensor res = random_tensor(Shape{c.m, c.n}, 94);
    ref::LinearGrads want = ref::linear_backward(dy, x, w);
    const Tensor want_y = ref::linear(x, w, b, Act::gelu, res);
    std::vector<Tensor> first;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor y = Tensor::empty(Shape{c.m, c.n});
      linear_forward(y, x, w, b, Act::gelu, res);
      Tensor y2 = res.clone();
      linear_forward(y2, x, w, Tensor(), Act::none, y2);  // y2 += x w^T
      Tensor dx = Tensor::full(x.shape(), 0.5f), dw = Tensor::full(w.shape(), 0.25f);
      Tensor db = Tensor::full(b.shape(), 0.25f), dx2 = Tensor::full(x.shape(), 1e9f);
      linear_backward(dx, dw, db, dy, x, w);
      linear_backward(dx2, dw, db, dy, x, w, GradWrite::overwrite);  // adds dw, db again
      const std::string what = std::to_string(c.m) + "x" + std::to_string(c.k) + " -> " +
                               std::to_string(c.n) + ", " + std::to_string(threads) + " threads";
      EXPECT_LT(max_rel_error(y, want_y), 1e-5) << what;
      Tensor x_w = y2.clone();
      for (int64_t i = 0; i < x_w.numel(); ++i) x_w.at(i) -= res.at(i);
      EXPECT_LT(max_rel_error(x_w, ref::linear(x, w, Tensor(), Act::none, Tensor())), 1e-4) << what;
      EXPECT_LT(max_rel_error(dx2, want.dx), 1e-5) << what;
      for (int64_t i = 0; i < dx.numel(); ++i) dx.at(i) -= 0.5f;
      EXPECT_LT(max_rel_error(dx, want.dx), 1e-4) << what;
      for (int64_t i = 0; i < dw.numel(); ++i) dw.at(i) = (dw.at(i) - 0.25f) / 2;
      for (int64_t i = 0; i < db.numel(); ++i) db.at(i) = (db.at(i) - 0.25f) / 2;
      EXPECT_LT(max_rel_error(dw, want.dw), 1e-4) << what;
      EXPECT_LT(max_rel_error(db, want.db), 1e-4) << what;
      const std::vector<Tensor> now = {y, y2, dx, dx2, dw, db};
      if (threads == 1) first = now;
      const char* names[] = {"y", "y += x w^T", "dx", "dx overwritten", "dw", "db"};
      for (size_t t = 0; t < now.size(); ++t) {
        ASSERT_EQ(now[t].numel(), first[t].numel());
        EXPECT_EQ(0, std::memcmp(now[t].f32(), first[t].f32(), now[t].nbytes()))
            << names[t] << ", " << what;
      }
    }
  }
  set_num_threads(before);
}

// The fused fc1 + GELU of training: y and the derivative as linear_forward followed by
// gelu_forward_with_derivative (the reference linear, then the GELU op), over several blocks of
// rows with a partial last one, one block, a single row and no bias; the same bits on 1, 2 and 3
// threads (each block's product runs on one thread whatever the count).
TEST(LinearGeluWithDerivative, MatchesLinearThenGeluOnAnyThreadCount) {
  const int before = num_threads();
  struct Case {
    Shape x;
    int64_t n;
    bool bias;
  };
  // 512 outputs: blocks of 256 rows; 6272 = 24.5 blocks (vit-fmnist's fc1).
  for (const Case& c : {Case{Shape{128, 49, 128}, 512, true}, Case{Shape{3, 37}, 512, true},
                        Case{Shape{1, 16}, 24, false}, Case{Shape{700, 40}, 200, false}}) {
    const int64_t k = c.x.dim(-1);
    Tensor x = random_tensor(c.x, 70);
    Tensor w = random_tensor(Shape{c.n, k}, 71, 1.0 / std::sqrt(static_cast<double>(k)));
    Tensor b = c.bias ? random_tensor(Shape{c.n}, 72) : Tensor();
    Tensor pre = ref::linear(x, w, b, Act::none, Tensor());
    Tensor want_y = Tensor::empty(pre.shape()), want_d = Tensor::empty(pre.shape());
    gelu_forward_with_derivative(want_y, want_d, pre);
    Tensor first_y, first_d;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor y = Tensor::full(pre.shape(), 1e9f), d = Tensor::full(pre.shape(), 1e9f);
      linear_gelu_forward_with_derivative(y, d, x, w, b);
      const std::string what =
          c.x.str() + " n " + std::to_string(c.n) + ", " + std::to_string(threads) + " threads";
      EXPECT_LT(max_rel_error(y, want_y), 1e-5) << what;
      EXPECT_LT(max_rel_error(d, want_d), 1e-5) << what;
      if (threads == 1) {
        first_y = y.clone();
        first_d = d.clone();
      }
      EXPECT_EQ(max_rel_error(y, first_y), 0.0) << what;
      EXPECT_EQ(max_rel_error(d, first_d), 0.0) << what;
    }
  }
  set_num_threads(before);
}

// Its backward to fc2's input through the GELU: dx as linear_backward's (overwritten) times the
// derivative, the column sums as linear_backward's bias gradient of that dx (added to what the
// tensor holds); blocks with a partial last one, one block, a single row; the same bits on 1, 2
// and 3 threads.
TEST(LinearGeluBackwardData, MatchesLinearBackwardThenGeluOnAnyThreadCount) {
  const int before = num_threads();
  struct Case {
    Shape dy;  // [..., N]
    int64_t k;
  };
  for (const Case& c : {Case{Shape{128, 49, 128}, 512}, Case{Shape{3, 37}, 512},
                        Case{Shape{1, 16}, 24}, Case{Shape{700, 40}, 200}}) {
    const int64_t n = c.dy.dim(-1);
    const Shape xs = c.dy.with_last(c.k);
    Tensor dy = random_tensor(c.dy, 80);
    Tensor w = random_tensor(Shape{n, c.k}, 81, 1.0 / std::sqrt(static_cast<double>(n)));
    Tensor d = random_tensor(xs, 82);
    Tensor want = Tensor::empty(xs), none, x = Tensor::zeros(xs);
    linear_backward(want, none, none, dy, x, w, GradWrite::overwrite);
    gelu_backward_with_derivative(want, want, d);
    Tensor want_sums = Tensor::full(Shape{c.k}, 0.5f), xs2 = Tensor::zeros(xs.with_last(2));
    Tensor w2 = Tensor::zeros(Shape{c.k, 2});
    linear_backward(none, none, want_sums, want, xs2, w2);
    Tensor first, first_sums;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor dx = Tensor::full(xs, 1e9f), sums = Tensor::full(Shape{c.k}, 0.5f);
      linear_gelu_backward_data(dx, dy, w, d, sums);
      const std::string what =
          c.dy.str() + " k " + std::to_string(c.k) + ", " + std::to_string(threads) + " threads";
      EXPECT_LT(max_rel_error(dx, want), 1e-5) << what;
      EXPECT_LT(max_rel_error(sums, want_sums), 1e-5) << what;
      if (threads == 1) {
        first = dx.clone();
        first_sums = sums.clone();
      }
      EXPECT_EQ(max_rel_error(dx, first), 0.0) << what;
      EXPECT_EQ(max_rel_error(sums, first_sums), 0.0) << what;
    }
  }
  set_num_threads(before);
  Tensor dy = Tensor::zeros(Shape{4, 6}), w = Tensor::zeros(Shape{6, 8});
  Tensor d = Tensor::zeros(Shape{4, 8}), dx = Tensor::zeros(Shape{4, 8});
  Tensor sums = Tensor::zeros(Shape{8}), bad_sums = Tensor::zeros(Shape{6});
  EXPECT_THROW(linear_gelu_backward_data(dx, dy, w, d, bad_sums), ShapeError);
  Tensor bad_d = Tensor::zeros(Shape{4, 7});
  try {
    linear_gelu_backward_data(dx, dy, w, bad_d, sums);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("linear_gelu_backward_data"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 7]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[6, 8]"), std::string::npos) << msg;
  }
  Tensor w16 = w.to(DType::bf16);
  EXPECT_THROW(linear_gelu_backward_data(dx, dy, w16, d, sums), std::invalid_argument);
}

TEST(LinearGeluWithDerivative, ErrorsNameTheProblem) {
  Tensor x = Tensor::zeros(Shape{4, 8}), w = Tensor::zeros(Shape{6, 8}), b;
  Tensor y = Tensor::zeros(Shape{4, 6}), d = Tensor::zeros(Shape{4, 6});
  auto expect = [](const std::function<void()>& f, const std::string& a, const std::string& c) {
    try {
      f();
      ADD_FAILURE() << "no error naming " << a << " and " << c;
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("linear_gelu_forward_with_derivative"), std::string::npos) << msg;
      EXPECT_NE(msg.find(a), std::string::npos) << msg;
      EXPECT_NE(msg.find(c), std::string::npos) << msg;
    }
  };
  Tensor bad_d = Tensor::zeros(Shape{4, 5});
  expect([&] { linear_gelu_forward_with_derivative(y, bad_d, x, w, b); }, "[4, 5]", "[4, 6]");
  Tensor bad_w = Tensor::zeros(Shape{6, 7});
  expect([&] { linear_gelu_forward_with_derivative(y, d, x, bad_w, b); }, "[6, 7]", "[4, 8]");
  expect([&] { linear_gelu_forward_with_derivative(y, y, x, w, b); }, "dydx", "neither y nor x");
  Tensor w16 = w.to(DType::bf16);
  expect([&] { linear_gelu_forward_with_derivative(y, d, x, w16, b); }, "f32", "bf16");
}

TEST(Linear, ShapeErrorsNameTheOpAndBothShapes) {
  Tensor x = Tensor::zeros(Shape{4, 3}), w = Tensor::zeros(Shape{2, 3});
  Tensor y = Tensor::empty(Shape{4, 5});
  std::string m = testing::message_of([&] { linear_forward(y, x, w, Tensor()); });
  EXPECT_NE(m.find("linear_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  EXPECT_THROW(linear_forward(y, x, w, Tensor()), ShapeError);

  Tensor y2 = Tensor::empty(Shape{4, 2});
  Tensor wk = Tensor::zeros(Shape{2, 4});
  m = testing::message_of([&] { linear_forward(y2, x, wk, Tensor()); });
  EXPECT_NE(m.find("[4, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
  EXPECT_THROW(linear_forward(y2, x, w, Tensor::zeros(Shape{3})), ShapeError);
  EXPECT_THROW(linear_forward(y2, x, w, Tensor(), Act::none, Tensor::zeros(Shape{2, 4})),
               ShapeError);

  Tensor dx = Tensor::zeros(Shape{4, 4}), none;
  m = testing::message_of([&] { linear_backward(dx, none, none, y2, x, w); });
  EXPECT_NE(m.find("linear_backward"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 4]"), std::string::npos) << m;
  EXPECT_THROW(linear_backward(none, none, none, y, x, w), ShapeError);
}

TEST(Linear, OutputMayNotBeTheInput) {
  Tensor x = random_tensor(Shape{4, 6}, 38), w = random_tensor(Shape{6, 6}, 39);
  std::string m = testing::message_of([&] { linear_forward(x, x, w, Tensor()); });
  EXPECT_NE(m.find("linear_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("must not be x"), std::string::npos) << m;
}

TEST(Linear, Bf16WeightsComputeInBf16OrExplainWhyNot) {
  Tensor x = random_tensor(Shape{3, 197, 64}, 34), w = random_tensor(Shape{48, 64}, 35, 0.125);
  Tensor b = random_tensor(Shape{48}, 36);
  Tensor wb = w.to(DType::bf16);
  Tensor y = Tensor::empty(Shape{3, 197, 48});
  if (!cpu_has_bf16()) {
    std::string m = testing::message_of([&] { linear_forward(y, x, wb, b); });
    EXPECT_NE(m.find("linear_forward"), std::string::npos) << m;
    EXPECT_NE(m.find("avx512_bf16"), std::string::npos) << m;
    EXPECT_NE(m.find(cpu_isa_name()), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
    GTEST_SKIP() << "this CPU (" << cpu_isa_name() << ") has no native bf16 matmul";
  }
  linear_forward(y, x, wb, b, Act::gelu);
  // The reference sees the same bf16-rounded operands, so the only difference is f32 vs double
  // accumulation order.
  Tensor xr = x.to(DType::bf16).to(DType::f32);
  EXPECT_LT(max_rel_error(y, ref::linear(xr, wb, b, Act::gelu)), 1e-5);
  Tensor dy = random_tensor(y.shape(), 37), dx = Tensor::zeros(x.shape()), none;
  linear_backward(dx, none, none, dy, x, wb);
  Tensor dyr = dy.to(DType::bf16).to(DType::f32);
  EXPECT_LT(max_rel_error(dx, ref::linear_backward(dyr, x, wb).dx), 1e-5);
}

}  // namespace
}  // namespace vitpe
