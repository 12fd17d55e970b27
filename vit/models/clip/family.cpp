// The CLIP image towers (Radford et al. 2021; timm's vit_*_clip_224 and _clip_quickgelu_224):
// timm's VisionTransformer with CLIP's pre-norm (a LayerNorm before the blocks, "norm_pre", and a
// patch embedding without bias), LayerNorm eps 1e-5, a class token and class-token pooling. The
// *_clip_224 names default to LAION weights fine-tuned on ImageNet-1k (GELU, a 1000-class head);
// the *_clip_quickgelu_224 names to image-text weights (OpenAI's activation x sigmoid(1.702 x),
// the head projecting to the joint embedding: 512 or 768 wide). Preprocessing as timm's default
// weights for each name. Files are timm's ViT state dicts; a preset or timm's config.json picks
// this family (the activation cannot be told from the tensors).
#include "vit/models/vit/vit_family.h"

namespace vitpe {

namespace {

ModelConfig clip(int64_t dim, int64_t depth, int64_t heads, int64_t patch, bool quick_gelu,
                 int64_t classes, double crop) {
  ModelConfig c = vit_family::vit_of(dim, depth, heads);
  c.family = "clip";
  c.patch = patch;
  c.classes = classes;
  if (classes == 1000) c.labels = imagenet_labels();
  VitArch& a = c.vit();
  a.norm_pre = true;
  a.eps = 1e-5f;
  if (quick_gelu) a.mlp = Mlp::quick_gelu;
  vit_family::clip_statistics(c);
  c.preprocess.crop_pct = crop;
  return c;
}

std::string describe(const ModelConfig& c) {
  return c.vit().mlp == Mlp::quick_gelu ? "CLIP image tower (quick_gelu)" : "CLIP image tower";
}

std::vector<PresetDef> presets() {
  // clang-format off
  return {
    {"vit_base_patch32_clip_224", "", "CLIP image tower",
     [] { return clip(768, 12, 12, 32, false, 1000, 0.9); }},
    {"vit_base_patch16_clip_224", "", "CLIP image tower",
     [] { return clip(768, 12, 12, 16, false, 1000, 0.95); }},
    {"vit_large_patch14_clip_224", "", "CLIP image tower",
     [] {
       ModelConfig c = clip(1024, 24, 16, 14, false, 1000, 1.0);
       c.preprocess.mean = c.preprocess.std_dev = {0.5f, 0.5f, 0.5f};  // its laion2b weights'
       return c;
     }},
    {"vit_base_patch32_clip_quickgelu_224", "", "CLIP image tower (quick_gelu)",
     [] { return clip(768, 12, 12, 32, true, 512, 0.9); }},
    {"vit_base_patch16_clip_quickgelu_224", "", "CLIP image tower (quick_gelu)",
     [] { return clip(768, 12, 12, 16, true, 512, 1.0); }},
    {"vit_large_patch14_clip_quickgelu_224", "", "CLIP image tower (quick_gelu)",
     [] { return clip(1024, 24, 16, 14, true, 768, 1.0); }},
  };
  // clang-format on
}

}  // namespace

const FamilyDef& clip_family_def() {
  static const FamilyDef def = vit_family::vit_based_family(
      "clip", "CLIP image towers (timm's vit_*_clip_224, _clip_quickgelu_224)", presets(),
      describe);
  return def;
}

}  // namespace vitpe
