// The layers ViT and Swin are built from. Each layer owns its parameters and the activations
// its backward needs; forward(..., training) keeps them, backward adds into the parameter
// gradients and into the input gradient (callers zero gradients first).
//
// Buffers are (re)allocated only when the input shape changes, so repeated forwards of one
// batch shape allocate nothing.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "encodings/encoding.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "vit/models/model.h"
#include "vit/models/windows.h"

namespace vitpe {

// The random stream a model's position-encoding parameters are drawn from, apart from its
// weights' (Rng(seed)): a model's blocks, head and embeddings at a seed are then the same
// whatever its encoding, so that an encoding study compares kinds on identical weights.
inline Rng encoding_rng(uint64_t seed) { return Rng(seed ^ 0x6e636f64696e6773ull); }

// The input check of every model's forward: images [B, C, H, W] (CPU f32) with C = config's
// channels and H, W positive multiples of the patch -> the patch grid H/p x W/p. Throws
// ShapeError naming `op`, the expected layout and the configured size.
Grid check_images(const char* op, const Tensor& images, const ModelConfig& config);

// Makes `t` a tensor of `shape` (reusing its storage when the shape is unchanged).
void ensure_shape(Tensor& t, const Shape& shape);
// A parameter with a zero gradient of the same shape.
Param make_param(std::string name, Tensor value, bool no_decay);

// Patch embedding parameters "patch_embed.proj.{weight [D, C, p, p], bias [D]}" with PyTorch's
// Conv2d default init, uniform(+-1/sqrt(C p p)).
std::pair<Param, Param> make_patch_embed_params(int64_t dim, int64_t channels, int64_t patch,
                                                Rng& rng);

class LayerNormLayer {
 public:
  LayerNormLayer() = default;
  LayerNormLayer(const std::string& name, int64_t dim, float eps);
  // x: [..., D] -> y: [..., D]
  void forward(Tensor& y, const Tensor& x, bool training);
  // dx += the input gradient, or dx = residual + it (residual defined: see layernorm_backward).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& residual = {});
  void collect(std::vector<Param*>& out) {
    out.push_back(&w_);
    out.push_back(&b_);
  }

 private:
  Param w_, b_;
  float eps_ = 1e-6f;
  Tensor x_, mean_, rstd_;
};

class LinearLayer {
 public:
  LinearLayer() = default;
  // Weight [out, in] ~ trunc_normal(0.02) (timm's ViT init), bias zero.
  LinearLayer(const std::string& name, int64_t in, int64_t out, bool bias, Rng& rng);
  // x: [..., in] -> y: [..., out] = act(x w^T + b) (* scale [out]) (+ residual). The scale
  // (layer scale at inference, in the product's epilogue) is not for training: its backward
  // would not see it.
  void forward(Tensor& y, const Tensor& x, bool training, Act act = Act::none,
               const Tensor& residual = {}, const Tensor& scale = {});
  // Training with a GELU after the layer: y = GELU(x w^T + b), dydx = GELU'(x w^T + b) (the
  // backward's dy is then the gradient of y times dydx).
  void forward_gelu_with_derivative(Tensor& y, Tensor& dydx, const Tensor& x);
  // dy is the gradient of the pre-activation output (callers run gelu_backward first).
  // overwrite_dx: dx = dy w instead of dx += dy w (a fresh buffer needs no zeroing first).
  // bias_grad_added: the caller has already added the bias gradient (the column sums of dy) to
  // bias().grad, as the GELU backward does in the same pass as its product.
  void backward(Tensor& dx, const Tensor& dy, bool overwrite_dx = false,
                bool bias_grad_added = false);
  void collect(std::vector<Param*>& out) {
    out.push_back(&w_);
    if (b_.value.defined()) out.push_back(&b_);
  }
  int64_t in() const { return w_.value.size(1); }
  int64_t out() const { return w_.value.size(0); }
  Param& weight() { return w_; }
  Param& bias() { return b_; }
  // Inference precision (Model::set_precision): makes the bf16 (or bf16-rounded) weight copy,
  // or the int8 weights, or with f32 and `pack` the weights packed for the CPU's matmul
  // (pack_weights; a training forward drops them).
  void set_precision(Precision p, bool pack = false);
  // Takes `from`'s converted weights (bf16 or packed: shared; int8: copied) for the same
  // weights: a stream's replica (vit/models/streams.h).
  void share_precision(const LinearLayer& from);
  // Bytes of the converted weights this layer holds besides its f32 weights.
  int64_t converted_bytes() const;

 private:
  Param w_, b_;
  Tensor x_;
  Precision precision_ = Precision::f32;
  Tensor w_low_;            // bf16 weights (bf16), or bf16-rounded f32 weights (bf16-emulated)
  Tensor x_low_;            // bf16-rounded input (bf16-emulated)
  Int8Weights w_int8_;      // per-channel s8 weights (int8)
  PackedWeights w_packed_;  // f32 weights and their packed copy (f32 inference)
};

// Multi-head self-attention with an optional attention-site encoding:
// x [B, N, D] -> qkv -> heads -> (rotate q, k) -> softmax(q k^T * scale + bias + mask) v
// -> merge heads -> proj (+ residual).
//
// With `cosine` (Swin V2): softmax(normalize(q) normalize(k)^T * exp(min(logit_scale_h, log 100))
// + bias + mask) v, logit_scale "<name>.logit_scale" [H, 1, 1] initialised to log 10, no decay.
class AttentionLayer {
 public:
  AttentionLayer() = default;
  // qkv_bias: the projection's bias (DINOv3's has none).
  AttentionLayer(const std::string& name, int64_t dim, int64_t heads,
                 std::unique_ptr<AttentionEncoding> encoding, Rng& rng, bool cosine = false,
                 bool qkv_bias = true);
  // x: [B, N, D] (B = images x windows), mask: [W, N, N] or undefined, residual: [B, N, D] or
  // undefined, out_scale: [D] or undefined (inference only) -> y: [B, N, D] = residual +
  // out_scale * the projection's output
  void forward(Tensor& y, const Tensor& x, const AttnGeometry& geom, const Tensor& mask,
               bool training, const Tensor& residual = {}, const Tensor& out_scale = {});
  // overwrite_dx: dx = the input gradient instead of dx += it.
  void backward(Tensor& dx, const Tensor& dy, bool overwrite_dx = false);
  void collect(std::vector<Param*>& out);
  void collect_linears(std::vector<LinearLayer*>& out) {
    out.push_back(&qkv_);
    out.push_back(&proj_);
  }
  AttentionEncoding* encoding() { return encoding_.get(); }
  int64_t heads() const { return heads_; }
  // The attention probabilities [B, H, N, N] of the last forward(training = true) (undefined
  // before one): diagnostics read them.
  const Tensor& probs() const { return probs_; }

 private:
  int64_t dim_ = 0, heads_ = 0;
  LinearLayer qkv_, proj_;
  std::unique_ptr<AttentionEncoding> encoding_;
  Param logit_scale_;  // cosine attention only
  AttnGeometry geom_;
  // The encoding's dense bias [H, N, N] for geom in bias_. Inference keeps it while the
  // geometry, the encoding's extension policy and augmentation and its parameters (compared value
  // by value: a table of a few thousand floats against H N^2 entries made from it) are those it
  // was made from: Swin's blocks otherwise rebuild it in every call.
  const Tensor& encoding_bias(const AttnGeometry& geom, bool training);
  bool bias_kept_ = false;
  AttnGeometry bias_geom_;
  ExtensionPolicy bias_policy_ = ExtensionPolicy::native;
  std::optional<uint64_t> bias_augmentation_;
  std::vector<const Param*> bias_params_;  // the encoding's parameters, taken with bias_from_
  std::vector<float> bias_from_;           // the parameters' values bias_ was made from
  // The last training forward ran in the tokens' layout (no rotation, no cosine): the backward
  // reads qkv_out_ and writes d_qkv_ directly, with no q_, k_, v_, o_ or their gradients.
  bool tokens_layout_ = false;
  // activations
  Tensor qkv_out_, q_, k_, v_, q_rot_, k_rot_, qn_, kn_, bias_, probs_, o_, merged_;
  // gradients
  Tensor d_merged_, d_o_, dq_, dk_, dv_, dq_rot_, dk_rot_, dqn_, dkn_, dbias_, d_qkv_;
};

// The MLP's variant (vit/models/vit/arch.h Mlp): timm's GELU Mlp, OpenAI CLIP's quick_gelu, or
// EVA-02's SwiGLU (fc1 [2 hidden, D]: gate half first), optionally with a LayerNorm over the
// hidden width before fc2 ("<name>.norm").
struct MlpStyle {
  Mlp kind = Mlp::gelu;
  bool norm = false;
  float eps = 1e-6f;
};

// fc1 -> GELU (or quick_gelu) -> fc2 (+ residual); SwiGLU: fc1 -> silu(gate) * value -> [norm]
// -> fc2.
class MlpLayer {
 public:
  MlpLayer() = default;
  MlpLayer(const std::string& name, int64_t dim, int64_t hidden, Rng& rng, MlpStyle style = {});
  // x: [..., D] -> y: [..., D] = fc2(gelu(fc1(x))) (* scale [D], inference only) + residual
  void forward(Tensor& y, const Tensor& x, bool training, const Tensor& residual = {},
               const Tensor& scale = {});
  // overwrite_dx: dx = the input gradient instead of dx += it.
  void backward(Tensor& dx, const Tensor& dy, bool overwrite_dx = false);
  void collect(std::vector<Param*>& out) {
    fc1_.collect(out);
    if (style_.norm) norm_.collect(out);
    fc2_.collect(out);
  }
  void collect_linears(std::vector<LinearLayer*>& out) {
    out.push_back(&fc1_);
    out.push_back(&fc2_);
  }

 private:
  LinearLayer fc1_, fc2_;
  MlpStyle style_;
  LayerNormLayer norm_;                    // SwiGLU with norm only
  Tensor pre_, h_, dh_, dpre_, hn_, dhn_;  // hn_: the normalised hidden
};

// How a block arranges its norms: pre-norm (ViT, Swin) or Swin V2's residual post-norm with
// cosine attention.
enum class BlockStyle : uint8_t { pre_norm, swin_v2 };

// The pre-norm residual block of ViT and Swin: x + attn(norm1(x)), then + mlp(norm2(.)).
// With a window layout (Swin) the attention runs inside windows:
// x + scatter(attn(gather(norm1(x)))), with the layout's shift mask.
// With layer scale (layer_scale > 0, timm's init_values; no windows): each branch is scaled per
// channel by a learned gamma, "ls1.gamma" and "ls2.gamma" [D], initialised to layer_scale:
// x + gamma1 * attn(norm1(x)), then + gamma2 * mlp(norm2(.)).
// BlockStyle::swin_v2: x + norm1(attn(x)) (windowed as above, on x itself), then
// + norm2(mlp(.)), with cosine attention (no layer scale).
class TransformerBlock {
 public:
  TransformerBlock() = default;
  TransformerBlock(const std::string& name, int64_t dim, int64_t heads, int64_t hidden, float eps,
                   std::unique_ptr<AttentionEncoding> encoding, Rng& rng, double layer_scale = 0,
                   BlockStyle style = BlockStyle::pre_norm, MlpStyle mlp = {},
                   bool qkv_bias = true);
  // x: [B, L, D] -> y: [B, L, D]. Without `windows`: attention over all L tokens (geom.tokens()
  // == L) with `mask` ([W, L, L] or undefined). With `windows`: over each window of the layout
  // (geom.window == windows->window), with the layout's mask.
  void forward(Tensor& y, const Tensor& x, const AttnGeometry& geom, const Tensor& mask,
               bool training, const WindowLayout* windows = nullptr);
  // For the last forward (training = true). Writes the input gradient into dx (overwritten: the
  // caller needs no zeroed buffer).
  void backward(Tensor& dx, const Tensor& dy);
  void collect(std::vector<Param*>& out);
  void collect_linears(std::vector<LinearLayer*>& out) {
    attn_.collect_linears(out);
    mlp_.collect_linears(out);
  }
  AttentionLayer& attention() { return attn_; }

 private:
  LayerNormLayer norm1_, norm2_;
  AttentionLayer attn_;
  MlpLayer mlp_;
  BlockStyle style_ = BlockStyle::pre_norm;
  void forward_post_norm(Tensor& y, const Tensor& x, const AttnGeometry& geom, const Tensor& mask,
                         bool training);
  void backward_post_norm(Tensor& dx, const Tensor& dy);
  Param ls1_, ls2_;                        // layer scale gammas (undefined without layer scale)
  const WindowLayout* windows_ = nullptr;  // of the last forward
  Tensor n1_, x1_, n2_, dn_, dx1_;
  Tensor a_, m_, dbranch_;      // layer scale: the unscaled branch outputs, a branch's gradient
  Tensor xw_, aw_, daw_, dxw_;  // windowed attention's input and output, and their gradients
};

// SigLIP's attention pooling (timm's AttentionPoolLatent with one latent, global_pool 'map'): a
// learned query ("<name>.latent" [1, 1, D], projected by "q") attends over the tokens (keys and
// values from "kv" [2D, D]), "proj" maps the result, and a residual MLP follows on its
// normalised self: y = p + mlp(norm(p)), p = proj(attention(q(latent), kv(x))).
class AttentionPoolLayer {
 public:
  AttentionPoolLayer() = default;
  AttentionPoolLayer(const std::string& name, int64_t dim, int64_t heads, int64_t hidden, float eps,
                     Rng& rng);
  // x: [B, N, D] -> y: [B, D]
  void forward(Tensor& y, const Tensor& x, bool training);
  // dy: [B, D] -> dx: [B, N, D] (overwritten); the parameters' gradients accumulate.
  void backward(Tensor& dx, const Tensor& dy);
  void collect(std::vector<Param*>& out);  // timm's order: latent, q, kv, proj, norm, mlp
  void collect_linears(std::vector<LinearLayer*>& out);

 private:
  int64_t dim_ = 0, heads_ = 0;
  Param latent_;
  LinearLayer q_, kv_, proj_;
  LayerNormLayer norm_;
  MlpLayer mlp_;
  Tensor query_, kv_out_, probs_, attended_, pooled_, normed_;
  Tensor d_normed_, d_pooled_, d_attended_, d_query_, d_kv_;
};

}  // namespace vitpe
