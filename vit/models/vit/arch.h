// The architecture of timm's VisionTransformer family as plain fields: the plain ViT and the
// variants timm builds from the same blocks (DeiT, DeiT-III, BEiT, Eva's RoPE-ViTs and EVA-02,
// register tokens, the DINOv2/DINOv3, CLIP and SigLIP encoders), as `vit/models/vit/vit.h` runs
// them.
#pragma once

#include <cstdint>
#include <string>

namespace vitpe {

// How a ViT turns its final tokens into one vector: the class token (timm's global_pool
// 'token'), the mean of the patch tokens ('avg'), or SigLIP's attention pooling ('map': a learned
// query attends over the tokens, then a residual MLP; "attn_pool.*").
enum class Pool : uint8_t { cls, avg, map };
const char* pool_name(Pool p);  // "cls", "avg", "map" (as our files write them)
Pool parse_pool(const std::string& name, const std::string& what);  // throws invalid_argument

// The MLP of a block: fc1 -> GELU -> fc2; EVA-02's SwiGLU (fc1 makes 2 x mlp_dim, the first half
// gates the second through SiLU, then fc2 from mlp_dim); or OpenAI CLIP's fc1 -> quick_gelu
// (x sigmoid(1.702 x)) -> fc2.
enum class Mlp : uint8_t { gelu, swiglu, quick_gelu };
const char* mlp_name(Mlp m);                                      // "gelu", "swiglu", "quick_gelu"
Mlp parse_mlp(const std::string& name, const std::string& what);  // throws invalid_argument

struct VitArch {
  int64_t dim = 384;       // token width, e.g. 384 (ViT-S), 768 (ViT-B)
  int64_t depth = 12;      // blocks, e.g. 12
  int64_t heads = 6;       // attention heads, e.g. 6 (head dim 64)
  int64_t mlp_dim = 1536;  // MLP hidden width, e.g. 4 * dim
  Mlp mlp = Mlp::gelu;
  bool mlp_norm = false;  // a LayerNorm over the hidden width before fc2 ("mlp.norm", EVA-02 B/L)
  Pool pool = Pool::cls;
  // Mean pooling of the normalised tokens (the final LayerNorm "norm" before the pooling; DINOv3,
  // SigLIP's gap variant) instead of timm's default, the norm after it ("fc_norm"). Class-token
  // and attention pooling always normalise the tokens first.
  bool norm_before_pool = false;
  bool class_token = true;  // a learned class token first (timm's default)
  // Each residual branch scaled by a learned per-channel gamma initialised to this (timm's
  // init_values; DeiT-III 1e-6); 0: no layer scale.
  double layer_scale = 0;
  // The token encoding covers the patch tokens only and is added before the class token is
  // prepended (DeiT-III: pos_embed has no class row).
  bool no_embed_class = false;
  // Learned register tokens ("reg_token" [1, R, D]) after the class token; like the class token
  // they get no 2D position, and mean pooling skips them.
  int64_t reg_tokens = 0;
  // DeiT's distillation token after the class token, with its own head ("head_dist"); the logits
  // are the mean of the two heads.
  bool dist_token = false;
  // CLIP's LayerNorm after the position encoding, before the blocks ("norm_pre"); the patch
  // embedding has no bias then (timm's pre_norm).
  bool norm_pre = false;
  bool qkv_bias = true;  // the qkv projections' bias (DINOv3's models have none)
  float eps = 1e-6f;     // LayerNorm epsilon (timm's ViT 1e-6)

  // The tokens before the patch tokens: class, distillation, registers.
  int64_t prefix_tokens() const {
    return (class_token ? 1 : 0) + (dist_token ? 1 : 0) + reg_tokens;
  }
  bool operator==(const VitArch&) const = default;
};

}  // namespace vitpe
