// The DINOv2 family (Oquab et al. 2023; timm's vit_*_patch14_dinov2 and _reg4_ variants, Darcet
// et al. 2024): self-supervised ViT image encoders, the features retrieval, k-NN and dense
// prediction build on. timm's VisionTransformer with patch 14 at 518 pixels, layer scale 1e-5,
// a class token and class-token pooling, no head (num_classes 0: the output is the pooled
// features); the giant model's MLP is SwiGLU (timm's SwiGLUPacked: fc1 makes both halves, the
// first gated through SiLU); the reg4 variants add 4 register tokens without position rows.
// Their lvd142m weights use ImageNet statistics, bicubic, crop 1.0. Files are timm's ViT state
// dicts; a preset or timm's config.json picks this family.
#include "vit/models/vit/vit_family.h"

namespace vitpe {

namespace {

ModelConfig dinov2(int64_t dim, int64_t depth, int64_t heads, bool giant, bool registers) {
  ModelConfig c = vit_family::vit_of(dim, depth, heads);
  c.family = "dinov2";
  c.patch = 14;
  c.img_rows = c.img_cols = 518;
  c.classes = 0;
  VitArch& a = c.vit();
  a.layer_scale = 1e-5;
  if (giant) {
    a.mlp = Mlp::swiglu;
    a.mlp_dim = 4096;  // timm: mlp_ratio 2.66667 * 2 packed, 8192 / 2
  }
  if (registers) {
    a.reg_tokens = 4;
    a.no_embed_class = true;
  }
  c.preprocess.crop_pct = 1.0;  // ImageNet statistics and bicubic: the defaults
  return c;
}

std::string describe(const ModelConfig& c) {
  const VitArch& a = c.vit();
  std::string s = "DINOv2";
  if (a.mlp == Mlp::swiglu) s += " (SwiGLU)";
  if (a.reg_tokens) s += " + " + std::to_string(a.reg_tokens) + " register tokens";
  return s;
}

std::vector<PresetDef> presets() {
  // clang-format off
  return {
    {"vit_small_patch14_dinov2", "", "DINOv2",
     [] { return dinov2(384, 12, 6, false, false); }},
    {"vit_base_patch14_dinov2", "", "DINOv2",
     [] { return dinov2(768, 12, 12, false, false); }},
    {"vit_large_patch14_dinov2", "", "DINOv2",
     [] { return dinov2(1024, 24, 16, false, false); }},
    {"vit_giant_patch14_dinov2", "", "DINOv2 (SwiGLU)",
     [] { return dinov2(1536, 40, 24, true, false); }},
    {"vit_small_patch14_reg4_dinov2", "", "DINOv2 + 4 register tokens",
     [] { return dinov2(384, 12, 6, false, true); }},
    {"vit_base_patch14_reg4_dinov2", "", "DINOv2 + 4 register tokens",
     [] { return dinov2(768, 12, 12, false, true); }},
    {"vit_large_patch14_reg4_dinov2", "", "DINOv2 + 4 register tokens",
     [] { return dinov2(1024, 24, 16, false, true); }},
    {"vit_giant_patch14_reg4_dinov2", "", "DINOv2 (SwiGLU) + 4 register tokens",
     [] { return dinov2(1536, 40, 24, true, true); }},
  };
  // clang-format on
}

}  // namespace

const FamilyDef& dinov2_family_def() {
  static const FamilyDef def = vit_family::vit_based_family(
      "dinov2", "DINOv2 image encoders (timm's vit_*_patch14_dinov2, _reg4_): features, no head",
      presets(), describe);
  return def;
}

}  // namespace vitpe
