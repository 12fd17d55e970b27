// Inside the ViT family's folder: the pieces its FamilyDef (family.cpp) is assembled from.
#pragma once

#include <string>
#include <vector>

#include "vit/models/family.h"

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

// checkpoint_names.cpp: timm's and torchvision's files.
std::vector<CheckpointDialect> dialects();
void check_tensors(const ModelConfig& c, const TensorMap& tensors, const std::string& path);

}  // namespace vitpe::vit_family
