// Checkpoints: our self-describing safetensors files, and timm / torchvision state dicts saved
// as safetensors (their layout recognised from the tensor names by the model families,
// vit/models/family.h, and mapped onto timm >= 0.9 names on load).
//
// Our files carry the model config as JSON in `__metadata__["vitpe.config"]`, so a file alone
// rebuilds its model. For foreign files the config comes from a preset (`--preset`, or the
// architecture in timm's config.json beside the file) or is inferred from tensor shapes by the
// file's family (depth, width, patch, classes, Swin's heads and window from the bias tables).
// Loading is strict: one error lists every missing, unexpected and mis-shaped tensor.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vitpe/vit/models/model.h"

namespace vitpe {

// Preprocessing set by the caller (flags), over whatever the file, its config.json or the
// preset say; empty / 0 fields keep those.
struct PreprocessOverrides {
  std::vector<float> mean, std_dev;  // one per channel
  std::optional<double> crop_pct;
  std::optional<CropMode> crop_mode;
  std::optional<Interpolation> interpolation;
  bool any() const {
    return !mean.empty() || !std_dev.empty() || crop_pct || crop_mode || interpolation;
  }
};

struct LoadOptions {
  std::string preset;  // config from this preset (shapes still checked)
  int64_t heads = 0;   // ViT heads when no preset (timm's files do not store them)
  // For timm / torchvision files: the positional encoding spec over the one read off the file
  // or the preset (a file without position tensors cannot tell an Eva RoPE-ViT from none).
  std::string encoding;
  int64_t window = 0;    // Swin V2 files, which do not store it
  // ViT files: the MLP's activation ("gelu", "quick_gelu", "swiglu"; "": read off the file or
  // the preset). A CLIP tower's file cannot tell GELU from OpenAI's quick_gelu.
  std::string mlp;
  int64_t img_rows = 0;  // image size when it cannot be inferred (0: 224, or the preset's)
  int64_t img_cols = 0;
  std::string labels_file;  // one class name per line (overrides the checkpoint's labels)
  // For timm / torchvision files: read the config.json a timm hub download keeps beside the
  // weights (its pretrained_cfg: input size, mean, std, crop, interpolation; label_names).
  bool read_config_json = true;
  PreprocessOverrides preprocess;
  // A foreign file whose config the tensors do not settle (an Eva RoPE-ViT's encoding, a ViT's
  // heads, a Swin V2's window) and nothing above settles is refused, naming the flags that would;
  // with this set it loads with the assumptions, each stated in the notes.
  bool assume_defaults = false;
};

struct LoadedModel {
  std::unique_ptr<Model> model;
  // The file's layout: "vitpe" (ours), a family's dialect ("timm ViT", "torchvision Swin"), or
  // "preset" for a preset name.
  std::string format = "vitpe";
  std::vector<std::string> notes;  // how the config was obtained (for `vitpe info`)
  std::string written_by;          // "vitpe X.Y.Z" from our files' metadata; "" if not recorded
};

// A checkpoint path, or a preset name (a freshly initialised model, seed 0).
LoadedModel load_model(const std::string& path_or_preset, const LoadOptions& opts = {});

// Our format: timm names, f32, config in the metadata. Atomic (temporary file + rename).
// extra_tensors (the trainer's optimizer state) are stored after the parameters.
void save_model(Model& model, const std::string& path,
                const std::map<std::string, std::string>& extra_metadata = {},
                const std::vector<std::pair<std::string, Tensor>>& extra_tensors = {});

// Copies the tensors of `tensors` (already mapped to our names) into the model's parameters.
// Throws one error listing missing, unexpected and mis-shaped tensors (with both shapes).
void load_params(Model& model, const std::map<std::string, Tensor>& tensors,
                 const std::string& source);

// Reads class names, one per line (empty lines are errors, with the line number).
std::vector<std::string> read_labels(const std::string& path);

// Applies a timm hub config.json (its "pretrained_cfg" and "label_names") to `config`: input
// size, mean, std, crop_pct, crop_mode, interpolation and the class names; returns what it set
// ("input 224x224, mean, std, crop_pct 0.9, bicubic, 1000 class names"), for notes. Throws
// std::runtime_error naming the file for invalid JSON, a field of the wrong type or a value the
// config refuses (a class count or channel count that differs from the weights').
std::string apply_timm_config_json(ModelConfig& config, const std::string& path);

}  // namespace vitpe
