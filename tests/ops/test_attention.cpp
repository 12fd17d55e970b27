// attention_forward / attention_backward (ops/cpu/attention.cpp) against the double reference
// (ops/reference/attention.cpp) on ViT and Swin shapes, and against central finite
// differences of a double attention on small shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ops/cpu/attention_tiles.h"
#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;

// Swin-style mask: -100 between tokens of different regions, 0 within a region. Window w
// splits its tokens into w + 1 groups by index so every window has a different pattern.
Tensor region_mask(int64_t windows, int64_t n) {
  Tensor m = Tensor::empty(Shape{windows, n, n});
  for (int64_t w = 0; w < windows; ++w)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        m.at((w * n + i) * n + j) = (i * (w + 1) / n == j * (w + 1) / n) ? 0.0f : -100.0f;
  return m;
}

struct AttentionCase {
  int64_t b, h, n, hd;
  bool bias;
  int64_t windows;  // 0: no mask
};

void check_attention_forward(const AttentionCase& c, uint64_t seed) {
  const Shape s{c.b, c.h, c.n, c.hd};
  Tensor q = random_tensor(s, seed), k = random_tensor(s, seed + 1), v = random_tensor(s, seed + 2);
  Tensor bias = c.bias ? random_tensor(Shape{c.h, c.n, c.n}, seed + 3) : Tensor();
  Tensor mask = c.windows ? region_mask(c.windows, c.n) : Tensor();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  Tensor want = ref::attention(q, k, v, scale, bias, mask);

  Tensor out = Tensor::full(s, 1e9f);
  Tensor probs = Tensor::full(Shape{c.b, c.h, c.n, c.n}, 1e9f);
  attention_forward(out, probs, q, k, v, scale, bias, mask);
  EXPECT_LT(max_rel_error(out, want), 1e-5) << s.str();
  // Every probability row is a distribution, and a masked-out probability is 0, not a
  // subnormal (which the products that read it would pay an assist for on Intel cores).
  for (int64_t r = 0; r < c.b * c.h * c.n; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < c.n; ++j) {
      const float p = probs.at(r * c.n + j);
      ASSERT_NE(std::fpclassify(p), FP_SUBNORMAL) << "row " << r << " column " << j;
      sum += p;
    }
    ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
  // Inference path (no probs tensor): same result.
  Tensor none;
  Tensor out2 = Tensor::full(s, 1e9f);
  attention_forward(out2, none, q, k, v, scale, bias, mask);
  EXPECT_LT(max_rel_error(out2, want), 1e-5) << s.str() << " without probs";
}

TEST(AttentionForward, ViTShapes) {
  check_attention_forward({1, 6, 197, 64, false, 0}, 1);  // ViT-S, batch 1
  check_attention_forward({3, 6, 197, 64, true, 0}, 2);   // batch 3 with a relative bias
}

TEST(AttentionForward, SwinWindowsWithMask) {
  // 3 images x 4 windows of 7 x 7 tokens, shift mask per window and a relative bias.
  check_attention_forward({12, 3, 49, 32, true, 4}, 3);
  check_attention_forward({4, 3, 49, 32, false, 4}, 4);  // batch 1 (one image of 4 windows)
}

// With more threads than (batch, head) pairs the forward splits each pair into row blocks.
TEST(AttentionForward, MoreThreadsThanPairs) {
  const int before = num_threads();
  set_num_threads(13);
  check_attention_forward({1, 2, 197, 64, true, 0}, 7);
  check_attention_forward({2, 1, 49, 32, true, 2}, 8);
  set_num_threads(before);
}

// Inference on AVX-512 runs vitpe's own register tiles (ops/cpu/attention_tiles.h): every panel
// width of the packed keys and values (head dimensions 16 to 128, key counts that leave a last
// panel of 16 or 32 columns), row blocks from 1 to 12 rows and their uneven splits, with and
// without bias and mask, against the double reference (elsewhere the same cases check oneDNN's
// sgemm path).
TEST(AttentionForward, OwnTilesEveryPanelAndRowBlock) {
  if (!cpu::attention_tiles_take(64)) {
    std::printf("note: no AVX-512 here: these shapes run oneDNN's sgemm path, not the tiles\n");
  }
  uint64_t seed = 40;
  for (int64_t hd : {16, 32, 48, 64, 80, 128}) {
    for (int64_t n : {1, 12, 13, 16, 17, 33, 50}) {
      check_attention_forward({2, 2, n, hd, n % 2 == 1, n > 12 ? 2 : 0}, seed++);
    }
  }
}

// The tiles sum every row in the same order whichever block it falls in, so the inference
// forward gives the same bits on any thread count (1 thread: whole pairs; 13: each pair's rows
// cut into blocks).
TEST(AttentionForward, InferenceSameBitsOnAnyThreadCount) {
  const Shape s{1, 2, 197, 64};
  Tensor q = random_tensor(s, 50), k = random_tensor(s, 51), v = random_tensor(s, 52);
  Tensor bias = random_tensor(Shape{2, 197, 197}, 53), none;
  const int before = num_threads();
  Tensor first;
  for (int threads : {1, 2, 3, 13}) {
    set_num_threads(threads);
    Tensor out = Tensor::full(s, 1e9f);
    attention_forward(out, none, q, k, v, 0.125f, bias);
    if (!first.defined()) {
      first = out.clone();
      continue;
    }
    EXPECT_EQ(max_rel_error(out, first), 0.0) << threads << " threads";
  }
  set_num_threads(before);
}

// Under FixedWorkSplit the row split of few pairs follows the shapes, not the thread count: the
// forward's output and probabilities are the same bits on 1, 2, 3 and 13 threads (without it,
// 13 threads split each pair's 197 rows into blocks and 1 thread does not).
TEST(AttentionForward, SameBitsOnAnyThreadCountUnderFixedWorkSplit) {
  const int before = num_threads();
  const FixedWorkSplit fixed;
  for (const AttentionCase& c :
       {AttentionCase{1, 2, 197, 64, true, 0}, AttentionCase{2, 1, 49, 32, true, 2},
        AttentionCase{4, 3, 17, 16, false, 0}}) {
    const Shape s{c.b, c.h, c.n, c.hd};
    Tensor q = random_tensor(s, 20), k = random_tensor(s, 21), v = random_tensor(s, 22);
    Tensor bias = c.bias ? random_tensor(Shape{c.h, c.n, c.n}, 23) : Tensor();
    Tensor mask = c.windows ? region_mask(c.windows, c.n) : Tensor();
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const Tensor want = ref::attention(q, k, v, scale, bias, mask);
    Tensor first_out, first_probs;
    for (int threads : {1, 2, 3, 13}) {
      set_num_threads(threads);
      Tensor out = Tensor::full(s, 1e9f), probs = Tensor::full(Shape{c.b, c.h, c.n, c.n}, 1e9f);
      attention_forward(out, probs, q, k, v, scale, bias, mask);
      EXPECT_LT(max_rel_error(out, want), 1e-5) << s.str() << ", " << threads << " threads";
      if (threads == 1) {
        first_out = out.clone();
        first_probs = probs.clone();
      }
      EXPECT_EQ(max_rel_error(out, first_out), 0.0) << s.str() << ", " << threads << " threads";
      EXPECT_EQ(max_rel_error(probs, first_probs), 0.0) << s.str() << ", " << threads;
    }
  }
  set_num_threads(before);
}

// The baseline (SSE) kernels, which AVX2 machines never pick by themselves.
TEST(AttentionForward, BaselineKernels) {
  cpu::avx2_allowed() = false;
  check_attention_forward({2, 3, 49, 32, true, 2}, 9);
  cpu::avx2_allowed() = true;
}

// The AVX2 softmax rows on an AVX-512 machine (which picks its AVX-512 rows by itself).
TEST(AttentionForward, Avx2KernelsOnAvx512Machines) {
  cpu::avx512_allowed() = false;
  check_attention_forward({2, 3, 49, 32, true, 2}, 10);
  check_attention_forward({1, 2, 197, 64, false, 0}, 11);
  cpu::avx512_allowed() = true;
}

TEST(AttentionForward, OddShapes) {
  check_attention_forward({2, 1, 1, 1, false, 0}, 5);
  check_attention_forward({3, 2, 7, 5, true, 3}, 6);
}

// Double attention of the float tensors, and the loss sum(w * out), for finite differences.
double attention_loss(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                      const Tensor& bias, const Tensor& mask, const Tensor& w) {
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2), hd = q.size(3);
  const int64_t windows = mask.defined() ? mask.size(0) : 1;
  double loss = 0;
  std::vector<double> s(n);
  for (int64_t bh = 0; bh < b * h; ++bh) {
    const int64_t base = bh * n * hd, hi = bh % h, wi = (bh / h) % windows;
    for (int64_t i = 0; i < n; ++i) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < hd; ++c) {
          dot += static_cast<double>(q.at(base + i * hd + c)) * k.at(base + j * hd + c);
        }
        s[j] = dot * scale + (bias.defined() ? bias.at((hi * n + i) * n + j) : 0.0) +
               (mask.defined() ? mask.at((wi * n + i) * n + j) : 0.0);
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t c = 0; c < hd; ++c) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += s[j] / sum * v.at(base + j * hd + c);
        loss += o * w.at(base + i * hd + c);
      }
    }
  }
  return loss;
}

void check_attention_backward(const AttentionCase& c, uint64_t seed) {
  const Shape s{c.b, c.h, c.n, c.hd};
  Tensor q = random_tensor(s, seed), k = random_tensor(s, seed + 1), v = random_tensor(s, seed + 2);
  Tensor bias = c.bias ? random_tensor(Shape{c.h, c.n, c.n}, seed + 3) : Tensor();
  Tensor mask;
  if (c.windows) {
    // Smaller penalties than Swin's -100 so that masked logits still have visible gradients.
    mask = region_mask(c.windows, c.n);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.at(i) *= 0.02f;
  }
  Tensor w = random_tensor(s, seed + 4);  // dL/dout
  const float scale = 0.7f;
  auto loss = [&] { return attention_loss(q, k, v, scale, bias, mask, w); };
  Tensor num_q = numeric_grad(q, loss), num_k = numeric_grad(k, loss),
         num_v = numeric_grad(v, loss);
  Tensor num_bias = c.bias ? numeric_grad(bias, loss) : Tensor();

  Tensor out = Tensor::empty(s), probs = Tensor::empty(Shape{c.b, c.h, c.n, c.n});
  attention_forward(out, probs, q, k, v, scale, bias, mask);
  // Gradients hold earlier values: backward must add to them.
  Tensor dq = Tensor::full(s, 1.0f), dk = Tensor::full(s, 2.0f), dv = Tensor::full(s, 3.0f);
  Tensor dbias = c.bias ? Tensor::full(Shape{c.h, c.n, c.n}, 4.0f) : Tensor();
  attention_backward(dq, dk, dv, dbias, w, q, k, v, probs, scale);
  auto minus = [](Tensor t, float x) {
    for (int64_t i = 0; i < t.numel(); ++i) t.at(i) -= x;
    return t;
  };
  EXPECT_LT(max_rel_error(minus(dq, 1.0f), num_q), 1e-5) << "dq " << s.str();
  EXPECT_LT(max_rel_error(minus(dk, 2.0f), num_k), 1e-5) << "dk " << s.str();
  EXPECT_LT(max_rel_error(minus(dv, 3.0f), num_v), 1e-5) << "dv " << s.str();
  if (c.bias) {
    // The bias is shared by the batch: its gradient is the sum over the batch of the logits'
    // gradients, which finite differences on the bias measure directly.
    EXPECT_LT(max_rel_error(minus(dbias, 4.0f), num_bias), 1e-5) << "dbias " << s.str();
  }
}

TEST(AttentionBackward, MatchesFiniteDifferences) {
  check_attention_backward({2, 2, 5, 3, true, 0}, 10);
  check_attention_backward({1, 1, 4, 2, false, 0}, 11);
}

TEST(AttentionBackward, WindowsWithMaskMatchFiniteDifferences) {
  check_attention_backward({4, 2, 5, 3, true, 2}, 12);  // 2 images x 2 windows
  cpu::avx2_allowed() = false;                          // the baseline (SSE) kernels
  check_attention_backward({2, 1, 11, 3, true, 1}, 13);
  cpu::avx2_allowed() = true;
}

// Only the requested gradients are written; the others may be undefined.
TEST(AttentionBackward, UndefinedGradientsAreSkipped) {
  const Shape s{2, 2, 6, 4};
  Tensor q = random_tensor(s, 20), k = random_tensor(s, 21), v = random_tensor(s, 22);
  Tensor dout = random_tensor(s, 23);
  Tensor out = Tensor::empty(s), probs = Tensor::empty(Shape{2, 2, 6, 6});
  attention_forward(out, probs, q, k, v, 0.5f);
  Tensor dq = Tensor::zeros(s), dk = Tensor::zeros(s), dv = Tensor::zeros(s), dbias;
  attention_backward(dq, dk, dv, dbias, dout, q, k, v, probs, 0.5f);
  Tensor dv_only = Tensor::zeros(s), none1, none2, none3;
  attention_backward(none1, none2, dv_only, none3, dout, q, k, v, probs, 0.5f);
  EXPECT_EQ(max_rel_error(dv_only, dv), 0.0);
  Tensor dq_only = Tensor::zeros(s);
  attention_backward(dq_only, none2, none1, none3, dout, q, k, v, probs, 0.5f);
  EXPECT_EQ(max_rel_error(dq_only, dq), 0.0);
}

// Steady state: repeated calls reuse the cached primitives and buffers.
// attention_forward_tokens reads the heads from the qkv projection's rows and writes the tokens'
// rows: the same numbers as splitting the heads, attention_forward and merging them, against the
// double reference, with bias and mask, odd sizes, and more threads than pairs.
void check_tokens(const AttentionCase& c, uint64_t seed) {
  const int64_t dim = c.h * c.hd;
  Tensor qkv = random_tensor(Shape{c.b, c.n, 3 * dim}, seed);
  const Shape s{c.b, c.h, c.n, c.hd};
  Tensor q = Tensor::empty(s), k = Tensor::empty(s), v = Tensor::empty(s);
  split_heads_forward(q, k, v, qkv, c.h);
  Tensor bias = c.bias ? random_tensor(Shape{c.h, c.n, c.n}, seed + 3) : Tensor();
  Tensor mask = c.windows ? region_mask(c.windows, c.n) : Tensor();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  Tensor want = Tensor::empty(Shape{c.b, c.n, dim});
  merge_heads_forward(want, ref::attention(q, k, v, scale, bias, mask));
  Tensor out = Tensor::full(Shape{c.b, c.n, dim}, 1e9f);
  attention_forward_tokens(out, qkv, c.h, scale, bias, mask);
  EXPECT_LT(max_rel_error(out, want), 1e-5) << s.str();
  Tensor o = Tensor::empty(s), none, split = Tensor::empty(Shape{c.b, c.n, dim});
  attention_forward(o, none, q, k, v, scale, bias, mask);
  merge_heads_forward(split, o);
  EXPECT_LT(max_rel_error(out, split), 1e-6) << s.str() << " against the split path";
}

TEST(AttentionForwardTokens, MatchesTheSplitPathAndTheReference) {
  check_tokens({1, 6, 197, 64, false, 0}, 70);  // ViT-S at batch 1
  check_tokens({2, 3, 49, 32, true, 0}, 71);    // Swin windows with a relative bias
  check_tokens({8, 3, 49, 32, true, 4}, 72);    // shifted windows: bias and mask
  check_tokens({1, 1, 7, 5, false, 0}, 73);     // tails
  check_tokens({3, 2, 33, 9, true, 3}, 74);
}

TEST(AttentionForwardTokens, ErrorsNameTheShapes) {
  Tensor out = Tensor::zeros(Shape{2, 5, 8});
  try {
    attention_forward_tokens(out, Tensor::zeros(Shape{2, 5, 25}), 2, 1.0f);
    ADD_FAILURE() << "no ShapeError for 25 columns";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 5, 25]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 * H * hd"), std::string::npos) << e.what();
  }
  try {
    attention_forward_tokens(out, Tensor::zeros(Shape{2, 5, 12}), 2, 1.0f);  // D = 4, not 8
    ADD_FAILURE() << "no ShapeError for out";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 5, 4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 5, 8]"), std::string::npos) << e.what();
  }
  Tensor qkv = Tensor::zeros(Shape{2, 5, 24});
  EXPECT_THROW(attention_forward_tokens(out, qkv, 2, 1.0f, Tensor::zeros(Shape{3, 5, 5})),
               ShapeError);
  EXPECT_THROW(attention_forward_tokens(out, qkv, 0, 1.0f), ShapeError);
}

// The training pair in the tokens' layout: attention_forward_tokens keeps the same probabilities
// as attention_forward, and attention_backward_tokens overwrites dqkv with what the split path
// (split_heads, attention_backward, split_heads_backward) accumulates into zeros, whatever dqkv
// held; dbias accumulates. The split path is checked against finite differences above.
void check_tokens_backward(const AttentionCase& c, uint64_t seed) {
  const int64_t dim = c.h * c.hd;
  Tensor qkv = random_tensor(Shape{c.b, c.n, 3 * dim}, seed);
  Tensor dout = random_tensor(Shape{c.b, c.n, dim}, seed + 1);
  const Shape s{c.b, c.h, c.n, c.hd}, ps{c.b, c.h, c.n, c.n};
  Tensor bias = c.bias ? random_tensor(Shape{c.h, c.n, c.n}, seed + 3) : Tensor();
  Tensor mask = c.windows ? region_mask(c.windows, c.n) : Tensor();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  // The split path.
  Tensor q = Tensor::empty(s), k = Tensor::empty(s), v = Tensor::empty(s), o = Tensor::empty(s);
  split_heads_forward(q, k, v, qkv, c.h);
  Tensor probs = Tensor::empty(ps);
  attention_forward(o, probs, q, k, v, scale, bias, mask);
  Tensor d_o = Tensor::zeros(s);
  merge_heads_backward(d_o, dout);
  Tensor dq = Tensor::zeros(s), dk = Tensor::zeros(s), dv = Tensor::zeros(s);
  Tensor dbias = c.bias ? Tensor::full(Shape{c.h, c.n, c.n}, 0.5f) : Tensor();
  attention_backward(dq, dk, dv, dbias, d_o, q, k, v, probs, scale);
  Tensor want = Tensor::zeros(qkv.shape());
  split_heads_backward(want, dq, dk, dv);
  // The tokens' layout.
  Tensor out = Tensor::empty(Shape{c.b, c.n, dim}), tprobs = Tensor::full(ps, 7.0f);
  attention_forward_tokens(out, tprobs, qkv, c.h, scale, bias, mask);
  EXPECT_LT(max_rel_error(tprobs, probs), 1e-6) << "probs " << s.str();
  // Overwritten, not added to: even NaN there must not reach the result.
  Tensor dqkv = Tensor::full(qkv.shape(), std::numeric_limits<float>::quiet_NaN());
  Tensor tdbias = c.bias ? Tensor::full(Shape{c.h, c.n, c.n}, 0.5f) : Tensor();
  attention_backward_tokens(dqkv, tdbias, dout, qkv, tprobs, c.h, scale);
  EXPECT_LT(max_rel_error(dqkv, want), 1e-6) << "dqkv " << s.str();
  if (c.bias) {
    EXPECT_LT(max_rel_error(tdbias, dbias), 1e-6) << "dbias " << s.str();
  }
  // Undefined dbias: the same dqkv.
  Tensor none, again = Tensor::zeros(qkv.shape());
  attention_backward_tokens(again, none, dout, qkv, tprobs, c.h, scale);
  EXPECT_EQ(max_rel_error(again, dqkv), 0.0) << s.str();
}

TEST(AttentionBackwardTokens, MatchesTheSplitPath) {
  check_tokens_backward({2, 4, 49, 32, false, 0}, 80);  // vit-fmnist's attention
  check_tokens_backward({2, 3, 49, 32, true, 0}, 81);   // Swin windows with a relative bias
  check_tokens_backward({8, 3, 49, 32, true, 4}, 82);   // shifted windows: bias and mask
  check_tokens_backward({1, 1, 7, 5, false, 0}, 83);    // tails
  check_tokens_backward({3, 2, 33, 9, true, 3}, 84);
  cpu::avx2_allowed() = false;  // the baseline (SSE) softmax gradient
  check_tokens_backward({2, 2, 11, 3, true, 1}, 85);
  cpu::avx2_allowed() = true;
}

TEST(AttentionBackwardTokens, ErrorsNameTheShapes) {
  Tensor qkv = Tensor::zeros(Shape{2, 5, 24}), probs = Tensor::zeros(Shape{2, 2, 5, 5});
  Tensor dout = Tensor::zeros(Shape{2, 5, 8}), dqkv = Tensor::zeros(Shape{2, 5, 24}), none;
  auto expect_error = [&](const std::function<void()>& f, const std::string& a,
                          const std::string& b) {
    try {
      f();
      ADD_FAILURE() << "no error naming " << a << " and " << b;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("attention_backward_tokens"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(a), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
    }
  };
  Tensor bad_qkv = Tensor::zeros(Shape{2, 5, 25});
  expect_error([&] { attention_backward_tokens(dqkv, none, dout, bad_qkv, probs, 2, 1.0f); },
               "[2, 5, 25]", "3 * H * hd");
  Tensor bad_dout = Tensor::zeros(Shape{2, 5, 4});
  expect_error([&] { attention_backward_tokens(dqkv, none, bad_dout, qkv, probs, 2, 1.0f); },
               "[2, 5, 4]", "[2, 5, 8]");
  Tensor bad_probs = Tensor::zeros(Shape{2, 2, 5, 4});
  expect_error([&] { attention_backward_tokens(dqkv, none, dout, qkv, bad_probs, 2, 1.0f); },
               "probs", "[2, 2, 5, 5]");
  Tensor bad_dqkv = Tensor::zeros(Shape{2, 5, 12});
  expect_error([&] { attention_backward_tokens(bad_dqkv, none, dout, qkv, probs, 2, 1.0f); },
               "dqkv", "[2, 5, 24]");
  Tensor bad_dbias = Tensor::zeros(Shape{2, 5, 4});
  expect_error([&] { attention_backward_tokens(dqkv, bad_dbias, dout, qkv, probs, 2, 1.0f); },
               "dbias", "[2, 5, 5]");
  expect_error([&] { attention_backward_tokens(qkv, none, dout, qkv, probs, 2, 1.0f); }, "dqkv",
               "qkv itself");
  Tensor out = Tensor::zeros(Shape{2, 5, 8});
  Tensor small_probs = Tensor::zeros(Shape{2, 2, 4, 4});
  EXPECT_THROW(attention_forward_tokens(out, small_probs, qkv, 2, 1.0f), ShapeError);
}

// The column sums (the qkv projection's bias gradient): linear_backward's bias gradient of dqkv
// (added to what the tensor holds), dqkv itself unchanged by asking for them, the same bits on
// 1, 2 and 3 threads, with a relative bias (Swin's windows) and odd sizes.
TEST(AttentionBackwardTokens, ColumnSumsAreTheQkvBiasGradient) {
  const int before = num_threads();
  struct AttentionCase {
    int64_t b, h, n, hd;
    bool bias;
  };
  for (const AttentionCase& c :
       {AttentionCase{3, 2, 49, 32, true}, AttentionCase{2, 3, 13, 12, false},
        AttentionCase{1, 1, 5, 8, false}}) {
    const int64_t dim = c.h * c.hd;
    Tensor qkv = random_tensor(Shape{c.b, c.n, 3 * dim}, 60);
    Tensor dout = random_tensor(Shape{c.b, c.n, dim}, 61);
    Tensor bias = c.bias ? random_tensor(Shape{c.h, c.n, c.n}, 62) : Tensor();
    Tensor out = Tensor::empty(Shape{c.b, c.n, dim}),
           probs = Tensor::empty(Shape{c.b, c.h, c.n, c.n});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    attention_forward_tokens(out, probs, qkv, c.h, scale, bias);
    Tensor want_dqkv = Tensor::empty(qkv.shape()), none;
    Tensor dbias0 = c.bias ? Tensor::zeros(bias.shape()) : Tensor();
    attention_backward_tokens(want_dqkv, dbias0, dout, qkv, probs, c.h, scale);
    Tensor want = Tensor::full(Shape{3 * dim}, 0.5f);
    Tensor x = Tensor::zeros(Shape{c.b, c.n, 2}), w = Tensor::zeros(Shape{3 * dim, 2});
    linear_backward(none, none, want, want_dqkv, x, w);
    Tensor first;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor dqkv = Tensor::full(qkv.shape(), 1e9f), sums = Tensor::full(Shape{3 * dim}, 0.5f);
      Tensor dbias = c.bias ? Tensor::zeros(bias.shape()) : Tensor();
      attention_backward_tokens(dqkv, dbias, dout, qkv, probs, c.h, scale, sums);
      EXPECT_EQ(max_rel_error(dqkv, want_dqkv), 0.0) << threads << " threads";
      if (c.bias) {
        EXPECT_EQ(max_rel_error(dbias, dbias0), 0.0) << threads << " threads";
      }
      EXPECT_LT(max_rel_error(sums, want), 1e-5) << threads << " threads";
      if (threads == 1) first = sums.clone();
      EXPECT_EQ(max_rel_error(sums, first), 0.0) << threads << " threads";
    }
  }
  set_num_threads(before);
  Tensor qkv = Tensor::zeros(Shape{2, 5, 24}), probs = Tensor::zeros(Shape{2, 2, 5, 5});
  Tensor dout = Tensor::zeros(Shape{2, 5, 8}), dqkv = Tensor::zeros(Shape{2, 5, 24}), none;
  Tensor bad = Tensor::zeros(Shape{23});
  try {
    attention_backward_tokens(dqkv, none, dout, qkv, probs, 2, 1.0f, bad);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("column_sums"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[24]"), std::string::npos) << e.what();
  }
}

TEST(AttentionForward, SteadyStateAllocatesNothing) {
  const Shape s{2, 3, 49, 32};
  Tensor q = random_tensor(s, 30), k = random_tensor(s, 31), v = random_tensor(s, 32);
  Tensor bias = random_tensor(Shape{3, 49, 49}, 33);
  Tensor out = Tensor::empty(s), none;
  attention_forward(out, none, q, k, v, 0.2f, bias);
  const int64_t allocs = storage_allocation_count();
  const int64_t prims = cpu::primitive_cache_size();
  for (int i = 0; i < 3; ++i) attention_forward(out, none, q, k, v, 0.2f, bias);
  EXPECT_EQ(storage_allocation_count(), allocs);
  EXPECT_EQ(cpu::primitive_cache_size(), prims);
}

TEST(Attention, ShapeErrorsNameOpAndShapes) {
  Tensor q = Tensor::zeros(Shape{6, 2, 5, 4}), k = Tensor::zeros(Shape{6, 2, 5, 3});
  Tensor v = Tensor::zeros(Shape{6, 2, 5, 4}), out = Tensor::zeros(Shape{6, 2, 5, 4}), none;
  auto expect_error = [](auto&& f, const std::string& op, const std::string& a,
                         const std::string& b) {
    try {
      f();
      ADD_FAILURE() << op << ": no ShapeError";
    } catch (const ShapeError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(op), std::string::npos) << msg;
      EXPECT_NE(msg.find(a), std::string::npos) << msg;
      EXPECT_NE(msg.find(b), std::string::npos) << msg;
    }
  };
  expect_error([&] { attention_forward(out, none, q, k, v, 1.0f); }, "attention_forward",
               "[6, 2, 5, 4]", "[6, 2, 5, 3]");
  Tensor bad_mask = Tensor::zeros(Shape{4, 5, 5});  // 4 windows do not divide a batch of 6
  expect_error([&] { attention_forward(out, none, q, q, v, 1.0f, Tensor(), bad_mask); },
               "attention_forward", "[6, 2, 5, 4]", "[4, 5, 5]");
  Tensor bad_bias = Tensor::zeros(Shape{3, 5, 5});
  expect_error([&] { attention_forward(out, none, q, q, v, 1.0f, bad_bias); }, "attention_forward",
               "[2, 5, 5]", "[3, 5, 5]");
  Tensor probs = Tensor::zeros(Shape{6, 2, 5, 4});
  Tensor dq = Tensor::zeros(q.shape());
  expect_error([&] { attention_backward(dq, none, none, none, v, q, q, v, probs, 1.0f); },
               "attention_backward", "[6, 2, 5, 5]", "[6, 2, 5, 4]");
}

}  // namespace
}  // namespace vitpe
