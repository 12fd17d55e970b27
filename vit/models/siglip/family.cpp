// The SigLIP image towers (Zhai et al. 2023; timm's vit_base_patch16_siglip_{224,256,384,512}
// and the _gap_ variants): timm's VisionTransformer without a class token, pooled by attention
// ("map": one learned query attends over the normalised tokens, then a residual MLP; timm's
// AttentionPoolLatent, "attn_pool.*") or, in the gap variants, by the mean of the normalised
// tokens; no head (num_classes 0: the output is the embedding). Their webli weights use mean =
// std = 0.5, bicubic, crop 0.9. Files are timm's ViT state dicts; a preset or timm's config.json
// picks this family.
#include "vit/models/vit/vit_family.h"

namespace vitpe {

namespace {

ModelConfig siglip(int64_t size, bool gap) {
  ModelConfig c = vit_family::vit_of(768, 12, 12);
  c.family = "siglip";
  c.img_rows = c.img_cols = size;
  c.classes = 0;
  VitArch& a = c.vit();
  a.class_token = false;
  a.pool = gap ? Pool::avg : Pool::map;
  a.norm_before_pool = gap;
  c.preprocess.mean = c.preprocess.std_dev = {0.5f, 0.5f, 0.5f};
  c.preprocess.crop_pct = 0.9;
  return c;
}

std::string describe(const ModelConfig& c) {
  return c.vit().pool == Pool::map ? "SigLIP image tower" : "SigLIP image tower (mean pooling)";
}

std::vector<PresetDef> presets() {
  // clang-format off
  return {
    {"vit_base_patch16_siglip_224", "", "SigLIP image tower", [] { return siglip(224, false); }},
    {"vit_base_patch16_siglip_256", "", "SigLIP image tower", [] { return siglip(256, false); }},
    {"vit_base_patch16_siglip_384", "", "SigLIP image tower", [] { return siglip(384, false); }},
    {"vit_base_patch16_siglip_512", "", "SigLIP image tower", [] { return siglip(512, false); }},
    {"vit_base_patch16_siglip_gap_224", "", "SigLIP image tower (mean pooling)",
     [] { return siglip(224, true); }},
    {"vit_base_patch16_siglip_gap_256", "", "SigLIP image tower (mean pooling)",
     [] { return siglip(256, true); }},
    {"vit_base_patch16_siglip_gap_384", "", "SigLIP image tower (mean pooling)",
     [] { return siglip(384, true); }},
    {"vit_base_patch16_siglip_gap_512", "", "SigLIP image tower (mean pooling)",
     [] { return siglip(512, true); }},
  };
  // clang-format on
}

}  // namespace

const FamilyDef& siglip_family_def() {
  static const FamilyDef def = vit_family::vit_based_family(
      "siglip", "SigLIP image towers (timm's vit_base_patch16_siglip_*, _gap_): embeddings",
      presets(), describe);
  return def;
}

}  // namespace vitpe
