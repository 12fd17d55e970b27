// A model's configuration: what every family shares (family, preset, input, classes, the parsed
// position encoding, the evaluation transform of its weights, class names) and the family's own
// architecture struct; the preset registry over all families.
//
// A config serialises to one flat JSON object (checkpoint __metadata__ "vitpe.config", `vitpe
// train --set key=value`): the common keys, then the architecture's, every field always written.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "vitpe/encodings/encoding.h"
#include "vitpe/vit/models/swin/arch.h"
#include "vitpe/vit/models/vit/arch.h"

namespace vitpe {

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

// The resize filter of the evaluation transform, as timm spells it.
enum class Interpolation : uint8_t { bilinear, bicubic };
// "bilinear" or "bicubic"; throws std::invalid_argument naming `what` otherwise.
Interpolation parse_interpolation(const std::string& name, const std::string& what = "preprocess");
const char* interpolation_name(Interpolation i);

// timm's crop_mode: "center" keeps the aspect ratio (the shorter side, or ResizeKeepRatio for
// non-square targets); "squash" resizes both sides to floor(size / crop_pct) regardless of the
// aspect ratio, then crops the centre.
enum class CropMode : uint8_t { center, squash };
CropMode parse_crop_mode(const std::string& name, const std::string& what = "preprocess");
const char* crop_mode_name(CropMode m);

// The evaluation transform that goes with a model's weights: timm's pretrained_cfg fields
// (vit/io/preprocess.h applies them).
struct PreprocessConfig {
  // Resize to size / crop_pct, then crop `size`. timm's weights use 0.875 to 1.0; more than 1
  // pads. The same range for the file fields and the flags.
  double crop_pct = 0.875;
  CropMode crop_mode = CropMode::center;
  Interpolation interpolation = Interpolation::bicubic;
  std::vector<float> mean = kImageNetMean;    // one per channel
  std::vector<float> std_dev = kImageNetStd;  // "std" in the JSON, as timm's pretrained_cfg

  // The ranges of the fields, whatever their source (file, config.json, flag).
  static constexpr double kMinCropPct = 0.01, kMaxCropPct = 4.0;
  static constexpr double kMaxMean = 1e3, kMinStd = 1e-6, kMaxStd = 1e3;
  // Throws std::invalid_argument naming `where` and the bad field (a value outside its range,
  // mean/std of another length than `channels`).
  void validate(int64_t channels, const std::string& where) const;
  bool operator==(const PreprocessConfig&) const = default;
};

struct ModelConfig {
  // The family (vit/models/family.h): "vit" or "swin"; its architecture struct is `arch`.
  std::string family = "vit";
  std::string name;  // the preset it came from, or "custom"
  // What it is in timm's terms ("DeiT-III", "Swin V2", "RoPE-ViT (Eva) mixed + APE"): set by
  // presets and by the checkpoint reader; empty: the family's description of the architecture.
  std::string label;
  int64_t img_rows = 224, img_cols = 224;
  int64_t channels = 3;
  int64_t patch = 16;
  int64_t classes = 1000;  // 0: no head; the model outputs its pooled features (DINOv2, ...)
  EncodingSpec encoding = EncodingSpec("learned1d");
  PreprocessConfig preprocess;
  std::vector<std::string> labels;  // class names (optional; empty = print indices)
  std::variant<VitArch, SwinArch> arch;

  // The architecture of a ViT-family (Swin-family) config; throws std::logic_error naming the
  // family otherwise.
  VitArch& vit();
  const VitArch& vit() const;
  SwinArch& swin();
  const SwinArch& swin() const;
  bool is_vit() const { return std::holds_alternative<VitArch>(arch); }
  bool is_swin() const { return std::holds_alternative<SwinArch>(arch); }

  Grid patch_grid() const { return {img_rows / patch, img_cols / patch}; }
  // The width of the tokens the token-site encoding sees (a ViT's dim, Swin's stage 0 width).
  int64_t embed_dim() const;
  // The tokens before the patch tokens (ViT: class, distillation, registers; Swin: none).
  int64_t prefix_tokens() const;
  // The label, or the family's description of the architecture when none was set.
  std::string family_label() const;

  // Serialised as JSON (checkpoint __metadata__ "vitpe.config") and back. from_json reads files
  // of every earlier version (fields added since take their defaults) and validates.
  std::string to_json() const;
  static ModelConfig from_json(const std::string& json);
  // Throws std::invalid_argument describing the first inconsistency (dim % heads, ...).
  void validate() const;
  bool operator==(const ModelConfig&) const = default;
};

// Presets by name, over every family: timm's model names (vit_small_patch16_224, ...; also spelt
// with dashes, as vitpe did first) with the preprocessing of timm's default weights, and our
// small models. Throws listing the known names and the closest ones.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();  // the primary names, family by family
bool is_preset(const std::string& name);  // a name or an alias
// Up to `most` preset names close to `name` (a misspelling), closest first; maybe none.
std::vector<std::string> closest_presets(const std::string& name, size_t most = 3);

}  // namespace vitpe
