// The model interface every family implements (vit/models/family.h); the configuration is in
// vit/models/config.h.
//
// A Model owns its parameters (Param: value, gradient, checkpoint name, weight-decay flag) and
// the activations of the last forward pass. forward(images, training=true) keeps what
// backward needs; backward(dlogits) accumulates into every parameter's gradient (zero_grad
// first). Buffers are reused between calls of the same batch shape, so a steady-state forward
// allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vitpe/encodings/encoding.h"
#include "vitpe/ops/tensor.h"
#include "vitpe/vit/models/config.h"

namespace vitpe {

// Inference precision of the linear layers (qkv, proj, fc1, fc2, patch merging, head):
//   f32            everything in f32 (the default; training always runs in f32)
//   bf16           bf16 weights and inputs, f32 accumulation and output (oneDNN's bf16 matmul:
//                  needs avx512_bf16 or AMX; elsewhere set_precision throws and says so)
//   bf16-emulated  the same numbers on any CPU at f32 speed: weights and inputs rounded to bf16,
//                  products in f32 (exact for bf16 inputs), f32 accumulation. For measuring the
//                  accuracy cost of bf16 before deploying on a CPU that has it.
//   int8           dynamic quantisation, as ONNX Runtime's quantize_dynamic: weights per output
//                  channel to 7-bit symmetric s8 (once, in set_precision), inputs per token to
//                  u8 at run time, oneDNN's u8 x s8 -> s32 matmul (any x86-64 CPU; fast with
//                  AVX2 and faster with VNNI), f32 bias, GELU and residual (ops/ops.h).
// Everything else (patch embedding, LayerNorm, attention, GELU, residuals) stays f32.
enum class Precision : uint8_t { f32, bf16, bf16_emulated, int8 };
// Every precision, in the order help texts list them.
inline constexpr Precision kPrecisions[] = {Precision::f32, Precision::bf16,
                                            Precision::bf16_emulated, Precision::int8};
const char* precision_name(Precision p);  // "f32", "bf16", "bf16-emulated", "int8"
// Parses a name of precision_name(); throws std::invalid_argument listing the choices.
Precision parse_precision(const std::string& name);
// Whether this CPU runs Precision::bf16 (oneDNN reports avx512_core_bf16 or better).
bool bf16_supported();

class LinearLayer;

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;

  // images: [B, C, H, W] (H, W multiples of the patch; other sizes than the configured one use
  // resampled encodings) -> logits [B, classes] (a model without a head, classes 0: its pooled
  // features [B, D]). The returned tensor is owned by the model and valid until the next forward.
  virtual const Tensor& forward(const Tensor& images, bool training = false) = 0;
  // dlogits: [B, classes] for the last forward(training=true); accumulates parameter gradients.
  virtual void backward(const Tensor& dlogits) = 0;

  // What one inference pass gives beside the logits: the features applications build on
  // (retrieval, clustering, dense prediction). The tensors are owned by the model and valid until
  // its next forward.
  struct Features {
    // [B, N, D]: the final tokens as timm's forward_features returns them, after the final norm
    // (before it for a model whose norm follows the pooling, timm's fc_norm). The first `prefix`
    // are the prefix tokens (class, distillation, registers), the rest the `grid` of patches in
    // row-major order (Swin: its last stage's grid).
    const Tensor* tokens = nullptr;
    int64_t prefix = 0;
    Grid grid;
    // [B, D]: the pooled vector the head reads, timm's forward_head(x, pre_logits=True).
    const Tensor* pooled = nullptr;
    // [B, classes]: the logits; for a model without a head (classes 0) the pooled vector.
    const Tensor* logits = nullptr;
  };
  // images as forward() (inference) -> the tokens, the pooled vector and the logits of one pass.
  virtual Features forward_features(const Tensor& images) = 0;

  // Every parameter with its full checkpoint name (timm names), in a stable order.
  std::vector<Param*> params();
  // The model's positional-encoding parts: the token part (or null), the conditional part (or
  // null) and each block's attention part in block order (null where a block has none).
  struct EncodingParts {
    TokenEncoding* token = nullptr;
    ConditionalEncoding* conditional = nullptr;
    std::vector<AttentionEncoding*> attention;
  };
  virtual EncodingParts encoding_parts() = 0;

  // After forward(training = true) of a model with global attention (ViT): every block's
  // attention probabilities [B, H, N, N] over `prefix` tokens and then the `grid` of patches
  // (row-major). Empty for windowed models (Swin), whose attention is per window.
  struct AttentionMaps {
    std::vector<const Tensor*> probs;
    int64_t prefix = 0;
    Grid grid;
  };
  virtual AttentionMaps attention_maps() { return {}; }

  // The parameters owned by the model's positional encodings (a subset of params()): what the
  // encoding parts report, so no caller guesses from names.
  std::vector<Param*> encoding_params();

  // How every encoding part meets a grid other than the configured one (`vitpe eval --policy`;
  // see ExtensionPolicy). Default: each kind's own rule. Learned values are not changed.
  void set_extension_policy(ExtensionPolicy p);
  ExtensionPolicy extension_policy() const { return policy_; }
  // The rule in effect for each part whose numbers depend on the grid, e.g. "learned1d
  // interpolate, relbias interpolate" (one entry per kind, blocks share theirs); "none" when no
  // part depends on the grid.
  std::string extension_rules();

  // ---- fine-tuning: layers and what backward computes ----
  // Every parameter's layer, in params() order, as layer-wise learning-rate decay counts them
  // (BEiT; timm's param_groups_layer_decay): 0 the embeddings (patch embedding, prefix tokens,
  // token encoding tables, CLIP's norm_pre), block i -> i + 1 (Swin: blocks counted across the
  // stages, a stage's patch merging with its first block, as timm's group_matcher has it; a
  // conditional encoding after k blocks -> k), blocks() + 1 the final norm, pooling and head.
  // The final norm follows BEiT: timm's group matchers put a final `norm` (not `fc_norm`) in the
  // last block's layer, one factor of the decay lower.
  std::vector<int64_t> param_layers();
  // Every parameter in params() order with its layer: the one list a family writes, which
  // params() and param_layers() read.
  virtual std::vector<std::pair<Param*, int64_t>> layered_params() = 0;
  // The transformer blocks (Swin: of every stage).
  virtual int64_t blocks() const = 0;
  // The classifier's parameters (head, DeiT's head_dist), a subset of params(); none without a
  // head (classes 0).
  virtual std::vector<Param*> head_params() = 0;

  // What backward() computes when the bottom of the model is frozen: from_layer > 0 leaves out
  // every parameter of a layer below it (param_layers()) and the pass stops there, so a frozen
  // block costs no backward at all; head_only computes the head's gradients alone (a linear
  // probe) from the pre-logits the forward kept, without going back through anything. Gradients
  // left out stay as they were (undefined until something computes them). from_layer is at most
  // blocks() + 1 (the final norm, pooling and head stay trainable).
  struct BackwardScope {
    int64_t from_layer = 0;
    bool head_only = false;
  };
  void set_backward_scope(BackwardScope scope);
  const BackwardScope& backward_scope() const { return scope_; }
  // The parameters backward() computes gradients for under the scope, in params() order.
  std::vector<Param*> trainable_params();

  // Approximate multiply-adds x 2 of one image's forward pass at the configured size.
  virtual double flops_per_image() const = 0;

  // Sets every gradient backward() computes (trainable_params()) to zero. Gradients are
  // allocated here (or by the first backward), not at construction: a model used only for
  // inference holds its weights once (and set_precision's packed or converted copy), and a
  // frozen part holds none.
  void zero_grad();
  int64_t num_params();
  int64_t num_encoding_params();

  // Switches the linear layers to `p` for inference (see Precision); converts the weights once.
  // With f32 and `pack`, the linear weights are packed into the layout the CPU's matmul reads
  // (pack_weights in ops/ops.h: with AVX-512, a second copy of them that spares every call
  // repacking them; nothing on AVX2); a training forward drops the packed copy. Call again after
  // the weights change (load_params does). forward(training = true) needs Precision::f32.
  void set_precision(Precision p, bool pack = true);
  Precision precision() const { return precision_; }
  // Converts the weights again for the precision set (after they changed in place): nothing to do
  // in plain f32.
  void weights_changed();
  // Takes `from`'s converted weights and precision (bf16 or packed copies shared, int8's copied):
  // `from` is a model of the same configuration whose weights this one shares
  // (vit/models/streams.h).
  void share_precision(Model& from);
  // Bytes of the converted weights the model holds besides its f32 weights (bf16, int8, packed).
  int64_t converted_weight_bytes();

 protected:
  // Every linear layer of the model (set_precision walks them).
  virtual void collect_linears(std::vector<LinearLayer*>& out) = 0;

  // Allocates zero gradients for the trainable parameters that have none yet; backward() calls
  // it first.
  void ensure_grads();

 private:
  Precision precision_ = Precision::f32;
  bool packed_ = false;  // f32 weights packed by set_precision
  ExtensionPolicy policy_ = ExtensionPolicy::native;
  BackwardScope scope_;
};

// Builds a model with freshly initialised parameters (deterministic from seed).
std::unique_ptr<Model> make_model(const ModelConfig& config, uint64_t seed = 0);

// FlexiViT's patch resize (Beyer et al. 2023): `model` (a ViT-family model) rebuilt for images of
// rows x cols with patches of `patch` pixels, its patch embedding resized by PI-resize
// (ops/resample.h: a patch and its bilinear resize give the same token) and every other
// parameter copied. A larger image with a proportionally larger patch keeps the trained grid, so
// the encoding meets no other grid: the evaluation separates the patches' content from the
// encoding's extension. The extension policy is carried over. Throws std::invalid_argument for a
// Swin-family model or a size that is not whole patches.
std::unique_ptr<Model> with_patch_size(Model& model, int64_t patch, int64_t rows, int64_t cols);

}  // namespace vitpe
