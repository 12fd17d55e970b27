// The DINOv3 family (Siméoni et al. 2025; timm's vit_{small,base,large}_patch16_dinov3 and the
// _qkvb variants): self-supervised ViT image encoders, built by timm's Eva class with rope_type
// 'dinov3'. A class token and 4 register tokens, no position table: the rotary embedding
// `rope-dinov3` (coordinates normalised to [-1, 1] on every grid, channels rotated in halves,
// temperature 100) in every block; layer scale 1e-5, LayerNorm eps 1e-5, no qkv bias (the
// _qkvb variants have q and v biases, timm's Eva q_bias / v_bias), the final norm before timm's
// default mean pooling of the patch tokens (use_fc_norm False; upstream DINOv3 reads the class
// token instead: --set pool=cls), no head. Their lvd1689m weights use ImageNet statistics,
// bicubic, crop 1.0 at 256. Files are timm's Eva state dicts, which the ViT family reads; the
// tensors alone tell a DINOv3 file (a class token and registers without position tensors) but
// not its heads: a preset or timm's config.json settles them.
#include "vit/models/vit/vit_family.h"

namespace vitpe {

ModelConfig vit_family::dinov3_config(int64_t dim, int64_t depth, int64_t heads, bool qkv_bias) {
  ModelConfig c = vit_family::vit_of(dim, depth, heads);
  c.family = "dinov3";
  c.patch = 16;
  c.img_rows = c.img_cols = 256;
  c.classes = 0;
  c.encoding = "rope-dinov3";
  VitArch& a = c.vit();
  a.reg_tokens = 4;
  a.layer_scale = 1e-5;
  a.eps = 1e-5f;
  a.qkv_bias = qkv_bias;
  a.pool = Pool::avg;
  a.norm_before_pool = true;
  c.preprocess.crop_pct = 1.0;  // ImageNet statistics and bicubic: the defaults
  return c;
}

namespace {

std::string describe(const ModelConfig& c) {
  std::string s = "DINOv3";
  if (c.vit().qkv_bias) s += " (qkv bias)";
  if (c.vit().pool == Pool::cls) s += ", class-token pooling";
  return s;
}

std::vector<PresetDef> presets() {
  // clang-format off
  return {
    {"vit_small_patch16_dinov3", "", "DINOv3",
     [] { return vit_family::dinov3_config(384, 12, 6, false); }},
    {"vit_small_patch16_dinov3_qkvb", "", "DINOv3 (qkv bias)",
     [] { return vit_family::dinov3_config(384, 12, 6, true); }},
    {"vit_base_patch16_dinov3", "", "DINOv3",
     [] { return vit_family::dinov3_config(768, 12, 12, false); }},
    {"vit_base_patch16_dinov3_qkvb", "", "DINOv3 (qkv bias)",
     [] { return vit_family::dinov3_config(768, 12, 12, true); }},
    {"vit_large_patch16_dinov3", "", "DINOv3",
     [] { return vit_family::dinov3_config(1024, 24, 16, false); }},
    {"vit_large_patch16_dinov3_qkvb", "", "DINOv3 (qkv bias)",
     [] { return vit_family::dinov3_config(1024, 24, 16, true); }},
  };
  // clang-format on
}

}  // namespace

const FamilyDef& dinov3_family_def() {
  static const FamilyDef def = vit_family::vit_based_family(
      "dinov3", "DINOv3 image encoders (timm's vit_*_patch16_dinov3, _qkvb): features, no head",
      presets(), describe);
  return def;
}

}  // namespace vitpe
