// The ViT family: timm's VisionTransformer zoo (ViT, DeiT, DeiT-III, BEiT, Eva's RoPE-ViTs and
// EVA-02, register tokens) and torchvision's vit_*, built as VisionTransformer.
#include <utility>

#include "vit/models/vit/vit.h"
#include "vit/models/vit/vit_family.h"

namespace vitpe {

namespace vit_family {

std::string gpu_unsupported(const ModelConfig& c) {
  const VitArch& a = c.vit();
  if (a.mlp != Mlp::gelu) {
    return std::string("the '") + mlp_name(a.mlp) +
           "' MLP (only fc1 -> GELU -> fc2 runs on the GPU)";
  }
  if (a.mlp_norm) return "the LayerNorm inside the MLP (mlp_norm)";
  return "";
}

FamilyDef vit_based_family(const std::string& name, const std::string& summary,
                           std::vector<PresetDef> presets,
                           std::function<std::string(const ModelConfig&)> describe) {
  FamilyDef f = vit_family_def();
  f.name = name;
  f.summary = summary;
  f.presets = std::move(presets);
  f.blank = [name] {
    ModelConfig c = blank();
    c.family = name;
    return c;
  };
  f.describe = std::move(describe);
  f.dialects.clear();
  f.files_family = "vit";
  f.timm_prefixes = {"vit_"};
  return f;
}

}  // namespace vit_family

const FamilyDef& vit_family_def() {
  static const FamilyDef def = [] {
    FamilyDef f;
    f.name = "vit";
    f.summary =
        "Vision Transformer: timm's ViT, DeiT, DeiT-III, BEiT, RoPE-ViT, EVA-02 and torchvision's "
        "vit_*";
    f.layout = AttentionLayout::global;
    f.presets = vit_family::presets();
    f.blank = vit_family::blank;
    f.arch_to_json = vit_family::arch_to_json;
    f.arch_from_json = vit_family::arch_from_json;
    f.validate = vit_family::validate;
    f.describe = vit_family::describe;
    f.info = vit_family::info;
    f.token_prefix = vit_family::token_prefix;
    f.attention_sites = vit_family::attention_sites;
    f.build = [](const ModelConfig& c, uint64_t seed) -> std::unique_ptr<Model> {
      return std::make_unique<VisionTransformer>(c, seed);
    };
    f.dialects = vit_family::dialects();
    f.timm_prefixes = {"vit_", "vit-", "deit", "beit", "eva", "flexivit"};
    f.head_weight = "head.weight";
    f.check_tensors = vit_family::check_tensors;
    f.gpu_unsupported = vit_family::gpu_unsupported;
    return f;
  }();
  return def;
}

}  // namespace vitpe
