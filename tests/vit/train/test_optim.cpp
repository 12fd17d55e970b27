// Tests of vit/train/optim.cpp against double-precision references written from PyTorch's AdamW and
// clip_grad_norm_ formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "tests/testing.h"
#include "vit/train/optim.h"

namespace vitpe {
namespace {

Param make_param(const std::string& name, int64_t n, uint64_t seed, bool no_decay) {
  Param p;
  p.name = name;
  p.value = testing::random_tensor({n}, seed);
  p.grad = testing::random_tensor({n}, seed + 100, 0.5);
  p.no_decay = no_decay;
  return p;
}

TEST(AdamW, ThreeStepsMatchADoubleReference) {
  Param a = make_param("w", 37, 1, false), b = make_param("norm.bias", 5, 2, true);
  AdamWOptions o;
  o.weight_decay = 0.1f;
  AdamW opt({&a, &b}, o);
  // Double reference of both params over 3 steps with changing gradients and lrs.
  struct Ref {
    std::vector<double> w, m, v;
  };
  auto init = [](const Param& p) {
    Ref r;
    r.w.assign(p.value.f32(), p.value.f32() + p.value.numel());
    r.m.assign(r.w.size(), 0);
    r.v.assign(r.w.size(), 0);
    return r;
  };
  Ref ra = init(a), rb = init(b);
  const double lrs[3] = {1e-3, 3e-3, 2e-3};
  for (int t = 1; t <= 3; ++t) {
    for (auto [p, r] : {std::pair{&a, &ra}, std::pair{&b, &rb}}) {
      for (int64_t k = 0; k < p->grad.numel(); ++k) p->grad.at(k) = std::sin(1.7 * k + t) * 0.3f;
      const double lr = lrs[t - 1];
      for (size_t k = 0; k < r->w.size(); ++k) {
        const double g = p->grad.at(static_cast<int64_t>(k));
        if (!p->no_decay) r->w[k] *= 1 - lr * 0.1;
        r->m[k] = 0.9 * r->m[k] + 0.1 * g;
        r->v[k] = 0.999 * r->v[k] + 0.001 * g * g;
        const double mh = r->m[k] / (1 - std::pow(0.9, t));
        const double vh = r->v[k] / (1 - std::pow(0.999, t));
        r->w[k] -= lr * mh / (std::sqrt(vh) + 1e-8);
      }
    }
    opt.step(static_cast<float>(lrs[t - 1]));
  }
  EXPECT_EQ(opt.steps(), 3);
  for (auto [p, r] : {std::pair{&a, &ra}, std::pair{&b, &rb}}) {
    for (size_t k = 0; k < r->w.size(); ++k) {
      ASSERT_NEAR(p->value.at(static_cast<int64_t>(k)), r->w[k], 2e-6 * (1 + std::fabs(r->w[k])))
          << p->name << "[" << k << "]";
    }
  }
}

// A parameter of several update blocks (16384 elements each) and a partial one, with the AVX2
// and the SSE kernel and on 1, 2 and 3 threads: the reference's values, and the same bits
// whatever the thread count.
TEST(AdamW, BlocksOfLargeParamsMatchTheReferenceOnAnyThreadCount) {
  const int64_t n = 3 * 16384 + 1003;
  std::vector<float> first;
  const int before = num_threads();
  for (bool avx2 : {true, false}) {
    if (avx2 && !cpu::cpu_has_avx2_fma()) continue;
    cpu::avx2_allowed() = avx2;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Param a = make_param("w", n, 3, false), b = make_param("norm.weight", 7, 4, true);
      const Tensor w0 = a.value.clone(), g = a.grad.clone();
      AdamWOptions o;
      o.weight_decay = 0.1f;
      AdamW opt({&a, &b}, o);
      opt.step(1e-3f);
      opt.step(1e-3f);  // the same gradient twice
      for (int64_t k = 0; k < n; k += 97) {
        double w = w0.at(k), m = 0, v = 0;
        for (int t = 1; t <= 2; ++t) {
          w *= 1 - 1e-3 * 0.1;
          m = 0.9 * m + 0.1 * g.at(k);
          v = 0.999 * v + 0.001 * double(g.at(k)) * g.at(k);
          w -= 1e-3 * (m / (1 - std::pow(0.9, t))) /
               (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
        }
        ASSERT_NEAR(a.value.at(k), w, 2e-6 * (1 + std::fabs(w)))
            << "[" << k << "] " << threads << " threads" << (avx2 ? " avx2" : " sse");
      }
      if (threads == 1) first.assign(a.value.f32(), a.value.f32() + n);
      EXPECT_EQ(0, std::memcmp(first.data(), a.value.f32(), sizeof(float) * n))
          << threads << " threads" << (avx2 ? " avx2" : " sse");
    }
  }
  cpu::avx2_allowed() = true;
  set_num_threads(before);
}

TEST(AdamW, NoDecayParamsAreNotShrunkByWeightDecay) {
  // With a zero gradient, Adam's update is 0: only weight decay moves the weights.
  Param a = make_param("w", 4, 3, false), b = make_param("pos_embed", 4, 4, true);
  a.grad.zero();
  b.grad.zero();
  Tensor a0 = a.value.clone(), b0 = b.value.clone();
  AdamWOptions o;
  o.weight_decay = 0.5f;
  AdamW opt({&a, &b}, o);
  opt.step(0.1f);
  for (int k = 0; k < 4; ++k) {
    EXPECT_FLOAT_EQ(a.value.at(k), a0.at(k) * (1 - 0.1f * 0.5f));
    EXPECT_EQ(b.value.at(k), b0.at(k));
  }
}

TEST(AdamW, StateRoundTripContinuesBitwise) {
  Param a = make_param("w", 50, 5, false);
  Param a2 = a;
  a2.value = a.value.clone();
  a2.grad = a.grad.clone();
  AdamW o1({&a});
  o1.step(1e-2f);
  o1.step(1e-2f);
  // Copy: a second optimizer restored from o1's state must continue identically.
  a2.value.copy_from(a.value);
  AdamW o2({&a2});
  auto st = o1.state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "m.w");
  std::vector<std::pair<std::string, Tensor>> copy;
  for (auto& [n, t] : st) copy.emplace_back(n, t.clone());
  o2.load_state(copy, o1.steps());
  o1.step(5e-3f);
  o2.step(5e-3f);
  EXPECT_EQ(0, std::memcmp(a.value.f32(), a2.value.f32(), a.value.nbytes()));
  copy.pop_back();
  EXPECT_THROW(o2.load_state(copy, 1), std::runtime_error);
}

TEST(Schedule, WarmupThenCosine) {
  Schedule s;
  s.base_lr = 1e-3;
  s.min_lr = 1e-5;
  s.warmup = 10;
  s.total = 110;
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), (1e-3 + 1e-5) / 2, 1e-15);  // halfway through the cosine
  EXPECT_NEAR(s.at(35), 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(s.at(110), 1e-5, 1e-15);
  EXPECT_NEAR(s.at(500), 1e-5, 1e-15);
  for (int64_t i = 10; i < 110; ++i) EXPECT_LE(s.at(i + 1), s.at(i));
}

TEST(ClipGradNorm, ScalesToTheMaxNormAndReturnsTheNorm) {
  Param a = make_param("a", 1000, 6, false), b = make_param("b", 70000, 7, false);
  double sq = 0;
  for (Param* p : {&a, &b})
    for (int64_t k = 0; k < p->grad.numel(); ++k) sq += double(p->grad.at(k)) * p->grad.at(k);
  const double norm = std::sqrt(sq);
  Tensor g0 = b.grad.clone();
  // Below the threshold: unchanged.
  EXPECT_NEAR(clip_grad_norm({&a, &b}, norm * 2), norm, 1e-9 * norm);
  EXPECT_EQ(0, std::memcmp(g0.f32(), b.grad.f32(), g0.nbytes()));
  // Above: scaled by max / (norm + 1e-6), the new norm is max.
  EXPECT_NEAR(clip_grad_norm({&a, &b}, 1.0), norm, 1e-9 * norm);
  double sq2 = 0;
  for (Param* p : {&a, &b})
    for (int64_t k = 0; k < p->grad.numel(); ++k) sq2 += double(p->grad.at(k)) * p->grad.at(k);
  EXPECT_NEAR(std::sqrt(sq2), 1.0, 1e-5);
  EXPECT_NEAR(b.grad.at(123), g0.at(123) / (norm + 1e-6), 1e-6);
}

// The norm sums fixed blocks in a fixed order: the same bits on any thread count.
TEST(ClipGradNorm, SameBitsOnAnyThreadCount) {
  Param a = make_param("a", 1000, 8, false), b = make_param("b", 70001, 9, false);
  const int before = num_threads();
  set_num_threads(1);
  const double one = clip_grad_norm({&a, &b}, 0);
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    EXPECT_EQ(clip_grad_norm({&a, &b}, 0), one) << threads << " threads";
  }
  set_num_threads(before);
}

}  // namespace
}  // namespace vitpe
