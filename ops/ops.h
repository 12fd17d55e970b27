// The CPU compute of vitpe: every op is a forward/backward pair, llm.c style.
//
// Conventions (all ops):
// - Outputs are preallocated by the caller with the exact shape (a ShapeError otherwise), so a
//   steady-state forward pass allocates nothing. Inputs are CPU f32 unless stated.
// - Leading dimensions are flattened where an op works on rows: x [..., K] is M = numel/K rows.
// - Every backward ADDS into every gradient it writes (dx, dw, db, ...): callers zero the
//   gradients before a backward pass (linear_backward can overwrite its dx instead: GradWrite).
//   An undefined gradient tensor means "not needed".
// - oneDNN primitives are created once per shape and cached (ops/cpu/dnnl_cache.h).
// The naive references of all ops are in ops/reference.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "vitpe/ops/tensor.h"

namespace vitpe {

// ---- threads ------------------------------------------------------------------------------
// The calling thread's compute threads: OpenMP (our loops and oneDNN) follows it.
// 0 = keep OMP_NUM_THREADS / the default.
void set_num_threads(int n);
int num_threads();
// While one lives on the calling thread, the CPU ops give the same bits on any thread count:
// the f32 linears (and the patch embedding) run their products in pieces fixed by the shapes
// alone, each on one thread (threads take pieces as they finish), where oneDNN's own split
// depends on the thread count: which rows share a kernel, and for a weight gradient whose sum
// over rows is long and whose output is small, how that sum is cut between threads; attention
// cuts its rows by the shapes alone too. Every other CPU op is the same bits on any thread count
// either way. Training and its evaluation (vit/train) hold one; inference without one keeps
// oneDNN's split, which is faster for few rows (batch-1 inference). Scopes nest.
class FixedWorkSplit {
 public:
  FixedWorkSplit();
  ~FixedWorkSplit();
  FixedWorkSplit(const FixedWorkSplit&) = delete;
  FixedWorkSplit& operator=(const FixedWorkSplit&) = delete;
  // Whether one lives on the calling thread.
  static bool active();

 private:
  bool before_;
};
// Whether inference adapts its thread count to a busy machine by default (ops/
// adaptive_threads.h; ClassifierOptions::adaptive_threads): true unless the environment sets
// VITPE_ADAPTIVE_THREADS=0.
bool adaptive_threads_default();

// ---- the CPU ------------------------------------------------------------------------------
// True when oneDNN has a bf16 matmul for this CPU (avx512_core and later; not AVX2).
bool cpu_has_bf16();
// Name of the ISA oneDNN dispatches to ("avx2", "avx512_core", ...).
const char* cpu_isa_name();
// The calling thread's compute stream (0 unless set): forwards that run at the same time on
// several threads (vit/models/streams.h) each set their own, so that each runs oneDNN primitives
// of its own (a cached primitive runs one call at a time) instead of waiting for the others'.
void set_compute_stream(int stream);
int compute_stream();

// ---- linear ---------------------------------------------------------------------------------
// The activation a linear layer applies before its residual: none, GELU (erf, exact), or
// quick_gelu, x sigmoid(1.702 x) (OpenAI CLIP's).
enum class Act : uint8_t { none, gelu, quick_gelu };
constexpr float kQuickGeluAlpha = 1.702f;
// How a backward writes an input gradient: added to what the tensor holds (the convention
// above), or overwritten, so a fresh buffer needs neither zeroing nor reading.
enum class GradWrite : uint8_t { accumulate, overwrite };

// x: [..., K], w: [N, K] (f32, or bf16 for bf16 compute), b: [N] or undefined,
// residual: same shape as y or undefined, scale: [N] or undefined ->
// y: [..., N] = act(x w^T + b) * scale + residual
// (act first, then the per-output scale, then the residual: a layer-scaled branch added to its
// residual stream, x + gamma * proj(a), in the matmul's epilogue instead of passes of its own).
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                    Act act = Act::none, const Tensor& residual = {}, const Tensor& scale = {});
// f32 weights [N, K] reordered once into the layout oneDNN's f32 matmul reads on this CPU, for
// inference: with the AVX-512 brgemm kernels a blocked one (16 inputs x 64 outputs, the outputs
// padded to a multiple of 64), which the plain layout is repacked into on every call otherwise.
// Where the matmul prefers an unblocked layout (oneDNN's gemm:jit on AVX2, which reads the plain
// weights faster than a transposed copy) nothing is packed and `data` stays undefined. The
// packed copy is made from `plain` at pack time: after the weights change, pack them again.
struct PackedWeights {
  Tensor plain;                        // the weights [N, K] (shared, not copied)
  Tensor data;                         // the packed copy, or undefined
  std::shared_ptr<const void> layout;  // its oneDNN memory descriptor (ops/cpu/linear.cpp)
  bool defined() const { return plain.defined(); }
  bool packed() const { return data.defined(); }
};
// w: [N, K] CPU f32 -> w and, where this CPU's matmul reads a layout of its own, the packed copy.
PackedWeights pack_weights(const Tensor& w);
// linear_forward on packed weights: the same values as linear_forward(y, x, w.plain, b, act,
// residual), each row's products in the same order. A call whose matmul reads another layout
// than the packed one (none seen with oneDNN 2.6) reads w.plain instead.
void linear_forward(Tensor& y, const Tensor& x, const PackedWeights& w, const Tensor& b,
                    Act act = Act::none, const Tensor& residual = {}, const Tensor& scale = {});
// For training: y = GELU(x w^T + b) and dydx = GELU'(x w^T + b) (what linear_forward followed by
// gelu_forward_with_derivative gives), in blocks of rows: each block's product runs on one thread
// and its GELU follows while the product is in cache, so the pre-activation never goes to memory
// and back, and threads take blocks as they finish (a busy core does fewer). The same bits on
// any thread count. w f32; y and dydx [..., N], distinct, neither x.
void linear_gelu_forward_with_derivative(Tensor& y, Tensor& dydx, const Tensor& x, const Tensor& w,
                                         const Tensor& b);
// Its backward through the GELU for the layer after it (fc2 after fc1 + GELU): dx = (dy w) *
// gelu_derivative, overwritten, and column_sums [K] += the sums of dx over its rows, bit for bit
// as linear_backward sums a bias gradient (fc1's). In the same blocks of rows as the forward: the
// product never goes to memory and back before the GELU factor and the sums. dy: [..., N],
// w: [N, K] f32, gelu_derivative and dx: [..., K]. The layer's own dw and db are linear_backward's.
void linear_gelu_backward_data(Tensor& dx, const Tensor& dy, const Tensor& w,
                               const Tensor& gelu_derivative, Tensor& column_sums);
// dy: [..., N] -> dx: [..., K], dw: [N, K], db: [N] (each may be undefined). No activation:
// callers with a GELU run gelu_backward first on the saved pre-activation. dx_write chooses
// how dx is written; dw and db always accumulate.
void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, GradWrite dx_write = GradWrite::accumulate);

// ---- int8 linear (dynamic quantisation, as ONNX Runtime's quantize_dynamic) ---------------------
// y = act(x w^T + b) + residual with the product in integers: w quantised once per output channel
// (symmetric s8), x quantised per row at run time (asymmetric u8), then oneDNN's u8 x s8 -> s32
// matmul and an f32 epilogue:
//   w[n, k] ~ sw[n] q[n, k],  sw[n] = max_k |w[n, k]| / kInt8WeightMax, q = round(w / sw)
//   x[m, k] ~ sa[m] (a[m, k] - za[m]),  lo = min(0, min_k x), hi = max(0, max_k x),
//             sa = (hi - lo) / 255, za = round(-lo / sa), a = clamp(round(x / sa) + za, 0, 255)
//   y[m, n] = sa[m] sw[n] (acc[m, n] - za[m] sum_k q[n, k]) + b[n],  acc = a q^T exactly.
// (0 is exact in both; a row of zeros gets sa = sw = 1.) Rounding is to nearest, ties to even.
//
// Weights use 7 bits (|q| <= 63), not 8: on AVX2 and AVX-512 without VNNI, oneDNN multiplies
// u8 by s8 with vpmaddubsw, which adds two products into a saturating int16; 255 * 127 * 2
// overflows it, 255 * 63 * 2 = 32130 does not, so the s32 product is exact on every CPU
// (tests/ops/test_linear_int8.cpp checks it under ONEDNN_MAX_CPU_ISA=AVX2).
constexpr int kInt8WeightMax = 63;

// A weight matrix [N, K] quantised for linear_int8_forward (plain data, any copy is independent).
struct Int8Weights {
  int64_t n = 0, k = 0;
  std::vector<int8_t> q;     // [N, K] row-major, in [-kInt8WeightMax, kInt8WeightMax]
  std::vector<float> scale;  // [N]: sw
  std::vector<int32_t> sum;  // [N]: sum_k q[n, k], which the activations' zero point multiplies
  bool defined() const { return n > 0; }
};

// w: [N, K] CPU f32 -> its per-channel quantisation. Throws for an empty or non-finite w, and for
// K so long that an s32 accumulator could overflow (K > 133,000).
Int8Weights quantize_weights_int8(const Tensor& w);

// x: [..., K], w: [N, K] quantised, b: [N] or undefined, residual: same shape as y or undefined
// (may be y itself), scale: [N] or undefined -> y: [..., N] = act(x w^T + b) * scale + residual,
// with x w^T as above (quick_gelu takes no scale).
void linear_int8_forward(Tensor& y, const Tensor& x, const Int8Weights& w, const Tensor& b,
                         Act act = Act::none, const Tensor& residual = {},
                         const Tensor& scale = {});

// ---- patch embedding (convolution, kernel = stride = patch) -----------------------------------
// x: [B, C, H, W] (H, W multiples of p), w: [D, C, p, p], b: [D] -> y: [B, (H/p)*(W/p), D]
// with tokens in row-major grid order.
void patch_embed_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);
void patch_embed_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                          const Tensor& w);

// ---- depthwise 3x3 convolution over the token grid (CPVT's PEG) ------------------------------
// x: [B, prefix + rows*cols, D] (patch tokens row-major after the prefix), w: [D, 3, 3]
// (PyTorch's Conv2d(D, D, 3, padding=1, groups=D) weight [D, 1, 3, 3] squeezed), b: [D]
// -> y: [B, prefix + rows*cols, D] = x + DWConv3x3(x) on the patch tokens (stride 1, zero
// padding 1), the prefix tokens copied. The residual is part of the op: it is the whole of
// CPVT's PEG, so the model applies one op. y may not alias x (the convolution reads neighbours).
void dwconv3x3_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows,
                       int64_t cols, int64_t prefix);
// dy -> dx += dy + DWConv3x3^T(dy) (prefix tokens: dx += dy), dw: [D, 3, 3] and db: [D]
// accumulated (each may be undefined). dx may not alias dy. The sums over tokens run in the
// same order whatever the thread count.
void dwconv3x3_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, int64_t rows, int64_t cols, int64_t prefix);

// ---- layernorm --------------------------------------------------------------------------------
// x: [..., D], gamma/beta: [D] -> y: [..., D]; mean/rstd: [M] saved for backward (may be
// undefined for inference). The backward adds the input gradient to dx, or, with residual
// defined (x's shape; it may be dx itself), writes dx = residual + the gradient: a residual
// path's gradient and the norm's in one pass, with neither a copy nor a zeroed dx.
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& gamma,
                       const Tensor& beta, float eps);
void layernorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& residual = {});

// ---- elementwise ------------------------------------------------------------------------------
// GELU with erf (exact, as timm and torchvision). y may alias x.
void gelu_forward(Tensor& y, const Tensor& x);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
// For training: y = GELU(x) and dydx = GELU'(x) = Phi(x) + x phi(x) in one pass, so the backward
// needs no erf: dydx may be x itself (the pre-activation is not needed again); y may not.
void gelu_forward_with_derivative(Tensor& y, Tensor& dydx, const Tensor& x);
// dx = dy * dydx, overwritten (dx may be dy itself): gelu_backward from the saved derivative.
void gelu_backward_with_derivative(Tensor& dx, const Tensor& dy, const Tensor& dydx);
// The same, also adding to column_sums [N] (N: the last dimension) the sums of dx over its rows,
// bit for bit as linear_backward sums a bias gradient: the next linear layer's bias gradient
// while dx is in cache, instead of another pass over it.
void gelu_backward_with_derivative(Tensor& dx, const Tensor& dy, const Tensor& dydx,
                                   Tensor& column_sums);
// quick_gelu (OpenAI CLIP's MLP): y = x sigmoid(1.702 x); y may alias x.
void quick_gelu_forward(Tensor& y, const Tensor& x);
// dx = dy (s + 1.702 x s (1 - s)) with s = sigmoid(1.702 x), overwritten (dx may be dy).
void quick_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
// y = a + b (same shapes; y may alias a or b).
void add_forward(Tensor& y, const Tensor& a, const Tensor& b);
void add_backward(Tensor& da, Tensor& db, const Tensor& dy);
// A residual branch scaled per channel (timm's LayerScale, CaiT/DeiT-III): y = x + gamma * a,
// x, a, y [..., D], gamma [D]. y may alias x.
void layer_scale_add_forward(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& a);
// da = dy * gamma (overwritten; skipped when undefined), dgamma += sum over rows of dy * a.
// (The gradient of x is dy itself: the caller's residual path.) Deterministic: the sum over rows
// runs in the same order whatever the thread count.
void layer_scale_add_backward(Tensor& da, Tensor& dgamma, const Tensor& dy, const Tensor& gamma,
                              const Tensor& a);

// ---- gated linear unit (EVA-02's SwiGLU MLP) --------------------------------------------------
// x: [..., 2H] (timm's fc1 output: the gate half first, then the value half) -> y: [..., H] =
// silu(x[..., :H]) * x[..., H:], silu(g) = g / (1 + exp(-g)). y overwritten.
void swiglu_forward(Tensor& y, const Tensor& x);
// dy: [..., H] -> dx: [..., 2H] (overwritten).
void swiglu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);

// ---- Swin V2's scaled cosine attention --------------------------------------------------------
// q, k: [B, H, N, hd] -> qn = s_h q / max(|q|, 1e-12), kn = k / max(|k|, 1e-12) (per token and
// head, F.normalize), s_h = exp(min(logit_scale[h], max_log)); logit_scale holds H values (timm
// keeps [H, 1, 1]). Then attention with scale 1 on (qn, kn) is timm's
// (normalize(q) @ normalize(k)^T) * logit_scale.exp(). Outputs overwritten.
void cosine_qk_forward(Tensor& qn, Tensor& kn, const Tensor& q, const Tensor& k,
                       const Tensor& logit_scale, float max_log);
// dqn, dkn -> dq, dk (overwritten) and dlogit_scale (accumulated; zero where clamped). The sums
// over tokens run in the same order whatever the thread count.
void cosine_qk_backward(Tensor& dq, Tensor& dk, Tensor& dlogit_scale, const Tensor& dqn,
                        const Tensor& dkn, const Tensor& q, const Tensor& k,
                        const Tensor& logit_scale, float max_log);

// ---- softmax over the last dimension --------------------------------------------------------
void softmax_forward(Tensor& y, const Tensor& x);
void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y);

// ---- mean over tokens -----------------------------------------------------------------------
// x: [B, N, D] -> y: [B, D] = mean of x[:, start:, :] (start skips prefix tokens).
void mean_tokens_forward(Tensor& y, const Tensor& x, int64_t start = 0);
void mean_tokens_backward(Tensor& dx, const Tensor& dy, int64_t start = 0);

// ---- cross entropy with label smoothing --------------------------------------------------------
// logits: [B, C], targets: B class indices -> mean loss over the batch. probs: [B, C] receives
// softmax(logits) for the backward. Target distribution: (1 - s) one-hot + s / C.
float cross_entropy_forward(Tensor& probs, const Tensor& logits, const int32_t* targets,
                            float smoothing);
// dlogits += (probs - target distribution) / B * loss_scale
void cross_entropy_backward(Tensor& dlogits, const Tensor& probs, const int32_t* targets,
                            float smoothing, float loss_scale = 1.0f);

// ---- attention --------------------------------------------------------------------------------
// q, k, v: [B, H, N, hd]; bias: [H, N, N] added to every batch entry (or undefined);
// mask: [W, N, N] where B = images * W and batch entry b uses mask[b % W] (or undefined).
// out: [B, H, N, hd] = softmax(q k^T * scale + bias + mask) v.
// probs: [B, H, N, N] receives the softmax, which the backward needs; pass an undefined tensor
// at inference and the op uses its own cached workspace instead.
void attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                       const Tensor& v, float scale, const Tensor& bias = {},
                       const Tensor& mask = {});
// The same for inference, straight from the qkv projection's rows and into the tokens' rows, with
// no copies between the two layouts: qkv: [B, N, 3 * H * hd] (rows [q | k | v], head h at h * hd
// inside each, as split_heads_forward reads them) -> out: [B, N, H * hd] (as merge_heads_forward
// writes it). bias and mask as above; no probabilities are kept.
void attention_forward_tokens(Tensor& out, const Tensor& qkv, int64_t heads, float scale,
                              const Tensor& bias = {}, const Tensor& mask = {});
// For training, the same keeping the probabilities: probs [B, H, N, N] as attention_forward's.
void attention_forward_tokens(Tensor& out, Tensor& probs, const Tensor& qkv, int64_t heads,
                              float scale, const Tensor& bias = {}, const Tensor& mask = {});
// Attention pooling with a learned query (SigLIP's "map" head, timm's AttentionPoolLatent with
// one latent): the same query for every image attends over its tokens, head by head. q: [H * hd]
// (the projected latent, head h at h * hd), kv: [B, N, 2 * H * hd] (rows [k | v], as timm's kv
// projection) -> out: [B, H * hd] = softmax(q_h k_h^T * scale) v_h for every head h, and probs:
// [B, H, N] the softmax, which the backward needs. out and probs overwritten.
void latent_attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& kv,
                              int64_t heads, float scale);
// dout: [B, H * hd] -> dkv: [B, N, 2 * H * hd] (overwritten) and dq: [H * hd] (accumulated: the
// batch's sum, in the same order whatever the thread count).
void latent_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& q,
                               const Tensor& kv, const Tensor& probs, int64_t heads, float scale);
// dout: [B, H, N, hd] -> dq, dk, dv: [B, H, N, hd]; dbias: [H, N, N] = sum over the batch of
// the logits' gradient (or undefined). The mask has no gradient.
void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        float scale);
// The backward of attention_forward_tokens (with probs) in the tokens' layout: dout: [B, N, H * hd]
// -> dqkv: [B, N, 3 * H * hd], which is overwritten (every element: its q, k and v parts), so it
// needs no zeroing; dbias as above (accumulated). No copies between the layouts.
void attention_backward_tokens(Tensor& dqkv, Tensor& dbias, const Tensor& dout, const Tensor& qkv,
                               const Tensor& probs, int64_t heads, float scale);
// The same, also adding to column_sums [3 * H * hd] the sums of dqkv over its B * N rows: the qkv
// projection's bias gradient, from each pair's rows while they are in cache instead of another
// pass over dqkv. (Each pair's sums in float, then the batch in order in double: the same bits
// whatever the thread count.)
void attention_backward_tokens(Tensor& dqkv, Tensor& dbias, const Tensor& dout, const Tensor& qkv,
                               const Tensor& probs, int64_t heads, float scale,
                               Tensor& column_sums);

// ---- optimizer --------------------------------------------------------------------------------
// One AdamW update (torch.optim.AdamW; vit/train/optim.h has the formulas) of n elements in place,
// on the calling thread (the optimizer spreads a model's parameters over its threads in blocks):
//   w *= decay;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   w -= step_size m / (sqrt(v) inv_sqrt_bc2 + eps)
// with step_size = lr / (1 - beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t) and decay = 1 - lr wd
// (1 without weight decay). SIMD: AVX2 where the CPU has it, else SSE.
struct AdamWStep {
  float decay, beta1, beta2, step_size, inv_sqrt_bc2, eps;
};
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);

// ---- head layout --------------------------------------------------------------------------
// qkv: [B, N, 3*H*hd] (rows [q | k | v], head h at h*hd inside each) -> q, k, v: [B, H, N, hd].
void split_heads_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t heads);
void split_heads_backward(Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv);
// o: [B, H, N, hd] -> y: [B, N, H*hd].
void merge_heads_forward(Tensor& y, const Tensor& o);
void merge_heads_backward(Tensor& d_o, const Tensor& dy);

}  // namespace vitpe
