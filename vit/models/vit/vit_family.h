// Inside the ViT family's folder: the pieces its FamilyDef (family.cpp) is assembled from.
#pragma once

#include <string>
#include <vector>

#include "vit/models/family.h"

namespace vitpe {
const FamilyDef& vit_family_def();  // family.cpp
}  // namespace vitpe

namespace vitpe::vit_family {

// arch.cpp: the architecture's JSON, validation, description and sites.
ModelConfig blank();
void arch_to_json(const ModelConfig& c, nlohmann::json& j);
void arch_from_json(const nlohmann::json& j, ModelConfig& c);
void validate(const ModelConfig& c, const std::function<void(const std::string&)>& fail);
std::string describe(const ModelConfig& c);
std::vector<std::pair<std::string, std::string>> info(const ModelConfig& c);
int64_t token_prefix(const ModelConfig& c);
std::vector<AttentionSite> attention_sites(const ModelConfig& c);
std::string gpu_unsupported(const ModelConfig& c);

// presets.cpp
std::vector<PresetDef> presets();

// family.cpp: a family built on this architecture (VitArch, VisionTransformer) under its own
// name, presets and description, whose files are this family's (timm's VisionTransformer state
// dicts): the ViT family's definition with those replaced and no dialects of its own.
FamilyDef vit_based_family(const std::string& name, const std::string& summary,
                           std::vector<PresetDef> presets,
                           std::function<std::string(const ModelConfig&)> describe);
// presets.cpp: the preprocessing of OpenAI CLIP's weights (mean and std).
void clip_statistics(ModelConfig& c);
// A ViT of that width, depth and heads with an MLP of 4x the width, timm's defaults elsewhere.
ModelConfig vit_of(int64_t dim, int64_t depth, int64_t heads);

// vit/models/dinov3/family.cpp: a DINOv3 encoder of that width, depth and heads, as timm's
// vit_*_patch16_dinov3 (what a DINOv3 file's tensors are read as).
ModelConfig dinov3_config(int64_t dim, int64_t depth, int64_t heads, bool qkv_bias);

// checkpoint_names.cpp: timm's and torchvision's files.
std::vector<CheckpointDialect> dialects();
void check_tensors(const ModelConfig& c, const TensorMap& tensors, const std::string& path);

}  // namespace vitpe::vit_family
