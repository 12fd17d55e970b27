// The Swin family: timm's SwinTransformer and SwinTransformerV2 zoo and torchvision's swin_* and
// swin_v2_*, built as SwinTransformer.
#include "vit/models/swin/swin.h"
#include "vit/models/swin/swin_family.h"

namespace vitpe {

const FamilyDef& swin_family_def() {
  static const FamilyDef def = [] {
    FamilyDef f;
    f.name = "swin";
    f.summary = "Swin Transformer: timm's Swin and Swin V2, torchvision's swin_* and swin_v2_*";
    f.layout = AttentionLayout::windowed;
    f.presets = swin_family::presets();
    f.blank = swin_family::blank;
    f.arch_to_json = swin_family::arch_to_json;
    f.arch_from_json = swin_family::arch_from_json;
    f.validate = swin_family::validate;
    f.describe = swin_family::describe;
    f.info = swin_family::info;
    f.token_prefix = [](const ModelConfig&) { return int64_t{0}; };
    f.attention_sites = swin_family::attention_sites;
    f.build = [](const ModelConfig& c, uint64_t seed) -> std::unique_ptr<Model> {
      return std::make_unique<SwinTransformer>(c, seed);
    };
    f.dialects = swin_family::dialects();
    f.timm_prefixes = {"swin"};
    f.head_weight = "head.fc.weight";
    f.check_tensors = swin_family::check_tensors;
    f.gpu_unsupported = [](const ModelConfig& c) -> std::string {
      return c.swin().v2 ? "Swin V2 (residual post-norm blocks and scaled cosine attention)" : "";
    };
    return f;
  }();
  return def;
}

}  // namespace vitpe
