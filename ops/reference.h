// Naive references of every op in ops/ops.h: plain loops, double accumulation, fresh outputs.
// They are the readable definition of each op and what the tests compare the fast paths
// against. Shapes and semantics are those of ops/ops.h; backward references return fresh
// gradients (they do not accumulate).
#pragma once

#include <cstdint>
#include <utility>

#include "ops/ops.h"

namespace vitpe::ref {

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Act act = Act::none,
              const Tensor& residual = {});
// Returns {dx, dw, db}.
struct LinearGrads {
  Tensor dx, dw, db;
};
LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w);

Tensor patch_embed(const Tensor& x, const Tensor& w, const Tensor& b, int64_t patch);

// x + DWConv3x3(x) on the patch tokens, prefix copied (see dwconv3x3_forward), in double.
Tensor dwconv3x3(const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows, int64_t cols,
                 int64_t prefix);

struct LayerNormOut {
  Tensor y, mean, rstd;
};
LayerNormOut layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);

Tensor gelu(const Tensor& x);
// x sigmoid(1.702 x), in double.
Tensor quick_gelu(const Tensor& x);
// x + gamma * a (gamma [D] over the last dimension), in double.
Tensor layer_scale_add(const Tensor& x, const Tensor& gamma, const Tensor& a);
Tensor softmax(const Tensor& x);
// silu(first half) * second half of the last dimension, in double.
Tensor swiglu(const Tensor& x);
// Swin V2's normalised q and k, see cosine_qk_forward: {qn, kn}.
std::pair<Tensor, Tensor> cosine_qk(const Tensor& q, const Tensor& k, const Tensor& logit_scale,
                                    float max_log);
Tensor mean_tokens(const Tensor& x, int64_t start);
double cross_entropy(const Tensor& logits, const int32_t* targets, float smoothing);

// softmax(q k^T * scale + bias + mask) v, see attention_forward.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 const Tensor& bias = {}, const Tensor& mask = {});
// One query q [H * hd] for every image over kv [B, N, 2 * H * hd], see latent_attention_forward.
Tensor latent_attention(const Tensor& q, const Tensor& kv, int64_t heads, float scale);

}  // namespace vitpe::ref
