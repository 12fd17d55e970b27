// The model interface shared by ViT and Swin, their configuration, and the preset registry.
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
#include <vector>

#include "vitpe/encodings/encoding.h"
#include "vitpe/ops/tensor.h"

namespace vitpe {

enum class ModelKind : uint8_t { vit, swin };
enum class Pool : uint8_t { cls, avg };

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

// Normalisation statistics (in [0, 1] pixel units) written once: ImageNet's (timm's and
// torchvision's default) and Fashion-MNIST's training pixels (its presets and dataset).
inline const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;
// The 1000 ImageNet-1k class names in the order timm and torchvision index them (short forms,
// torchvision's list): the names of the 1000-class presets and of foreign 1000-class files.
const std::vector<std::string>& imagenet_labels();
inline const std::vector<std::string> kFashionMnistLabels = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

struct ModelConfig {
  ModelKind kind = ModelKind::vit;
  std::string name;  // preset name it came from, or "custom"
  int64_t img_rows = 224, img_cols = 224;
  int64_t channels = 3;
  int64_t patch = 16;
  int64_t classes = 1000;
  std::string encoding = "learned1d";
  // ViT
  int64_t dim = 384;
  int64_t depth = 12;
  int64_t heads = 6;
  int64_t mlp_dim = 1536;
  Pool pool = Pool::cls;
  bool class_token = true;  // ViT: a learned class token first (timm default)
  // ViT variants, timm's VisionTransformer arguments: layer_scale > 0 scales each residual
  // branch by a learned per-channel gamma initialised to it (init_values; DeiT-III: 1e-6);
  // no_embed_class: the token encoding covers the patch tokens only, added before the class
  // token is prepended (DeiT-III: pos_embed has no class row).
  // reg_tokens: learned register tokens ("reg_token" [1, R, D], Darcet et al.) after the class
  // token; like the class token they get no 2D position, and mean pooling skips them.
  // dist_token: DeiT's distillation token ("dist_token" [1, 1, D]) after the class token, with
  // its own head ("head_dist"); the logits are the mean of the two heads (timm at inference,
  // and here in training too).
  // mlp: "gelu" (fc1 -> GELU -> fc2) or "swiglu" (EVA-02: fc1 makes 2 x mlp_dim, the first half
  // gates the second through SiLU, then fc2 from mlp_dim); mlp_norm: a LayerNorm over the
  // hidden mlp_dim before fc2 ("mlp.norm", EVA-02 base and large).
  std::string mlp = "gelu";
  bool mlp_norm = false;
  double layer_scale = 0;
  bool no_embed_class = false;
  int64_t reg_tokens = 0;
  bool dist_token = false;
  float eps = 1e-6f;
  // Swin (dim = embed dim of stage 0; stage i has dim * 2^i channels)
  std::vector<int64_t> depths;       // blocks per stage
  std::vector<int64_t> stage_heads;  // heads per stage
  int64_t window = 7;
  float mlp_ratio = 4.0f;
  // Swin V2 (Liu et al. 2022; timm's swinv2_*): residual post-norm blocks (x + norm(attn(x)),
  // then x + norm(mlp(x))), scaled cosine attention with a learned per-head temperature
  // ("attn.logit_scale" [H, 1, 1], init log 10, at most log 100), q and v biases, and patch
  // merging that normalises after the reduction. Its position bias is the `cpb` encoding.
  bool swin_v2 = false;
  // Preprocessing for classification: timm's pretrained_cfg fields for its eval transform
  // (vit/io/preprocess.h). crop_mode "center" (resize the shorter side to size / crop_pct, then
  // crop) or "squash" (resize both sides to size / crop_pct, then crop); interpolation
  // "bicubic" or "bilinear".
  double crop_pct = 0.875;
  std::string crop_mode = "center";
  std::string interpolation = "bicubic";
  std::vector<float> mean = kImageNetMean;
  std::vector<float> std_dev = kImageNetStd;  // "std" in the JSON, as timm's pretrained_cfg
  // Class names (optional; empty = print indices).
  std::vector<std::string> labels;

  Grid patch_grid() const { return {img_rows / patch, img_cols / patch}; }
  // ViT: the tokens before the patch tokens (class token, distillation token, registers).
  int64_t prefix_tokens() const {
    return (class_token ? 1 : 0) + (dist_token ? 1 : 0) + reg_tokens;
  }
  // Serialised as JSON (checkpoint __metadata__ "vitpe.config") and back.
  std::string to_json() const;
  static ModelConfig from_json(const std::string& json);
  // Throws std::invalid_argument describing the first inconsistency (dim % heads, ...).
  void validate() const;
};

// The family a config belongs to, in timm's terms: "ViT", "DeiT-III" (layer scale and a
// position table without a class row), "ViT with layer scale", "ViT (no class row in
// pos_embed)", "Swin".
std::string model_family(const ModelConfig& c);

// Presets by name: timm's model names (vit_small_patch16_224, ...; also spelt with dashes, as
// vitpe did first) with the preprocessing of timm's default weights, and our small models.
// Throws listing the known names and the closest ones.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();  // the primary names
bool is_preset(const std::string& name);  // a name or an alias
// Up to `most` preset names close to `name` (a misspelling), closest first; maybe none.
std::vector<std::string> closest_presets(const std::string& name, size_t most = 3);

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;

  // images: [B, C, H, W] (H, W multiples of the patch; other sizes than the configured one use
  // resampled encodings) -> logits [B, classes]. The returned tensor is owned by the model and
  // valid until the next forward.
  virtual const Tensor& forward(const Tensor& images, bool training = false) = 0;
  // dlogits: [B, classes] for the last forward(training=true); accumulates parameter gradients.
  virtual void backward(const Tensor& dlogits) = 0;

  // Every parameter with its full checkpoint name (timm names), in a stable order.
  virtual std::vector<Param*> params() = 0;
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

  // Approximate multiply-adds x 2 of one image's forward pass at the configured size.
  virtual double flops_per_image() const = 0;

  // Sets every gradient to zero. Gradients are allocated here (or by the first backward), not
  // at construction: a model used only for inference holds its weights once.
  void zero_grad();
  int64_t num_params();
  int64_t num_encoding_params();

  // Switches the linear layers to `p` for inference (see Precision); converts the weights once.
  // Call again after the weights change. forward(training = true) needs Precision::f32.
  void set_precision(Precision p);
  Precision precision() const { return precision_; }

 protected:
  // Every linear layer of the model (set_precision walks them).
  virtual void collect_linears(std::vector<LinearLayer*>& out) = 0;

  // Allocates zero gradients for parameters that have none yet; backward() calls it first.
  void ensure_grads();

 private:
  Precision precision_ = Precision::f32;
  ExtensionPolicy policy_ = ExtensionPolicy::native;
};

// Builds a model with freshly initialised parameters (deterministic from seed).
std::unique_ptr<Model> make_model(const ModelConfig& config, uint64_t seed = 0);

}  // namespace vitpe
