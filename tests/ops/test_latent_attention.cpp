// latent_attention_forward / latent_attention_backward (ops/cpu/latent_attention.cpp), SigLIP's
// attention pooling: against the double reference, finite differences for q and kv, the batch's
// dq summed in the same order on any thread count, shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

TEST(LatentAttention, ForwardMatchesReferenceAndProbsSumToOne) {
  for (auto [b, n, heads, hd] : {std::tuple{2, 196, 12, 64}, std::tuple{3, 5, 2, 3},
                                 std::tuple{1, 1, 1, 1}}) {
    const int64_t d = heads * hd;
    const Tensor q = random_tensor({d}, 1), kv = random_tensor({b, n, 2 * d}, 2);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    Tensor out = Tensor::full({b, d}, 1e9f), probs = Tensor::full({b, heads, n}, 1e9f);
    latent_attention_forward(out, probs, q, kv, heads, scale);
    EXPECT_LT(max_rel_error(out, ref::latent_attention(q, kv, heads, scale)), 1e-5) << n;
    for (int64_t r = 0; r < b * heads; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += probs.at(r * n + j);
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

// A key 90 under the best one gets probability 0, not a subnormal exp(-90) (about 8e-40).
TEST(LatentAttention, FarBelowTheMaximumIsZeroNotSubnormal) {
  Tensor q = Tensor::full({2}, 0.0f), kv = Tensor::full({1, 3, 4}, 0.0f);  // kv rows [k | v]
  q.at(0) = 10.0f;
  kv.at(0) = 1.0f;   // key 0: logit 10
  kv.at(4) = -8.0f;  // key 1: logit -80
  kv.at(8) = 0.9f;   // key 2: logit 9
  for (int64_t j = 0; j < 3; ++j) kv.at(j * 4 + 2) = static_cast<float>(j + 1);
  Tensor out = Tensor::empty({1, 2}), probs = Tensor::empty({1, 1, 3});
  latent_attention_forward(out, probs, q, kv, 1, 1.0f);
  for (int64_t j = 0; j < 3; ++j) EXPECT_NE(std::fpclassify(probs.at(j)), FP_SUBNORMAL) << j;
  EXPECT_EQ(probs.at(1), 0.0f);
  EXPECT_LT(max_rel_error(out, ref::latent_attention(q, kv, 1, 1.0f)), 1e-5);
}

TEST(LatentAttention, BackwardMatchesFiniteDifferences) {
  const int64_t b = 2, n = 5, heads = 2, hd = 3, d = heads * hd;
  Tensor q = random_tensor({d}, 3), kv = random_tensor({b, n, 2 * d}, 4);
  const Tensor w = random_tensor({b, d}, 5);
  const float scale = 0.7f;
  Tensor out = Tensor::empty({b, d}), probs = Tensor::empty({b, heads, n});
  latent_attention_forward(out, probs, q, kv, heads, scale);
  Tensor dq = Tensor::full({d}, 0.25f);  // accumulated onto
  Tensor dkv = Tensor::full(kv.shape(), 1e9f);  // overwritten
  latent_attention_backward(dq, dkv, w, q, kv, probs, heads, scale);
  auto loss = [&] { return weighted_sum(ref::latent_attention(q, kv, heads, scale), w); };
  Tensor want_dq = numeric_grad(q, loss);
  for (int64_t i = 0; i < d; ++i) want_dq.at(i) += 0.25f;
  EXPECT_LT(max_rel_error(dq, want_dq), 1e-3);
  EXPECT_LT(max_rel_error(dkv, numeric_grad(kv, loss)), 1e-3);
}

TEST(LatentAttention, SameBitsOnAnyThreadCount) {
  const int64_t b = 9, n = 197, heads = 6, hd = 64, d = heads * hd;
  const Tensor q = random_tensor({d}, 6), kv = random_tensor({b, n, 2 * d}, 7);
  const Tensor dout = random_tensor({b, d}, 8);
  const int threads = num_threads();
  Tensor first_dq;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    Tensor out = Tensor::empty({b, d}), probs = Tensor::empty({b, heads, n});
    latent_attention_forward(out, probs, q, kv, heads, 0.125f);
    Tensor dq = Tensor::zeros({d}), dkv = Tensor::empty(kv.shape());
    latent_attention_backward(dq, dkv, dout, q, kv, probs, heads, 0.125f);
    if (!first_dq.defined()) first_dq = dq;
    EXPECT_EQ(std::memcmp(dq.f32(), first_dq.f32(), d * sizeof(float)), 0) << t << " threads";
  }
  set_num_threads(threads);
}

TEST(LatentAttention, ShapeErrorsSayWhatWasExpected) {
  const Tensor q = random_tensor({6}, 1), kv = random_tensor({2, 5, 10}, 2);
  Tensor out = Tensor::empty({2, 6}), probs = Tensor::empty({2, 2, 5});
  const std::string m =
      testing::message_of([&] { latent_attention_forward(out, probs, q, kv, 2, 1.0f); });
  EXPECT_NE(m.find("expected q [H * hd] and kv [B, N, 2 * H * hd] with H = 2, found [6] and "
                   "[2, 5, 10]"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace vitpe
