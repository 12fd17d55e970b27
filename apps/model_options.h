// Options shared by the commands that load a model (classify, info, convert, eval).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "apps/command.h"
#include "vit/io/checkpoint.h"

namespace vitpe::app {

struct ModelOptions {
  std::string model;
  std::string preset;
  std::string encoding;
  int64_t heads = 0;
  int64_t window = 0;
  std::string mlp;
  std::string img_size;  // "224" or "224x160"
  std::string labels;
  std::string precision = "f32";
  bool assume_defaults = false;
  // Preprocessing over the model's own (add_preprocess_options).
  std::string mean, std_dev, crop_mode, interpolation;
  double crop_pct = 0;

  LoadOptions load_options() const {
    LoadOptions o;
    o.preset = preset;
    o.encoding = encoding;
    o.heads = heads;
    o.window = window;
    o.mlp = mlp;
    o.labels_file = labels;
    o.assume_defaults = assume_defaults;
    if (!img_size.empty()) {
      // N or ROWSxCOLS, nothing else ("28abc" and "28x28x5" were once read as 28).
      const size_t x = img_size.find('x');
      const std::string what = "--img-size (N or ROWSxCOLS)";
      o.img_rows = parse_whole(img_size.substr(0, x), what, 1, 16384);
      o.img_cols =
          x == std::string::npos ? o.img_rows : parse_whole(img_size.substr(x + 1), what, 1, 16384);
    }
    using P = PreprocessConfig;
    if (!mean.empty())
      o.preprocess.mean = parse_real_list(mean, "--mean", -P::kMaxMean, P::kMaxMean);
    if (!std_dev.empty()) {
      o.preprocess.std_dev = parse_real_list(std_dev, "--std", P::kMinStd, P::kMaxStd);
    }
    if (crop_pct != 0) o.preprocess.crop_pct = crop_pct;
    if (!crop_mode.empty()) o.preprocess.crop_mode = parse_crop_mode(crop_mode, "--crop-mode");
    if (!interpolation.empty()) {
      o.preprocess.interpolation = parse_interpolation(interpolation, "--interpolation");
    }
    return o;
  }
};

// Adds --preset, --encoding, --heads, --img-size and (if with_labels) --labels; the model itself
// is added by the caller (positional or --model).
inline void add_model_options(CLI::App* cmd, ModelOptions& o, bool with_labels = true) {
  cmd->add_option("--preset", o.preset,
                  "For timm/torchvision files: take the config from this preset");
  cmd->add_option("--encoding", o.encoding,
                  "For timm/torchvision files: the positional encoding spec, over the one read off "
                  "the file or preset (e.g. rope-axial for an Eva RoPE-ViT without --preset)");
  cmd->add_option("--heads", o.heads, "For ViT files without config: number of heads")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--window", o.window, "For Swin V2 files (which do not store it): the window")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--mlp", o.mlp,
                  "For ViT files: the MLP's activation, which a CLIP tower's file does not tell "
                  "(gelu, quick_gelu; swiglu is read off the shapes)")
      ->check(CLI::IsMember({"gelu", "quick_gelu", "swiglu"}));
  cmd->add_option("--img-size", o.img_size,
                  "Input size N or ROWSxCOLS (default: the checkpoint's, else 224)");
  cmd->add_flag("--assume-defaults", o.assume_defaults,
                "For timm/torchvision files that do not tell every part of the model (heads, an "
                "Eva RoPE-ViT's encoding, a Swin V2's window): load with the assumptions the "
                "refusal names instead of refusing");
  if (with_labels) {
    cmd->add_option("--labels", o.labels, "Class names, one per line")->check(CLI::ExistingFile);
  }
}

// Adds --mean, --std, --crop-pct, --crop-mode and --interpolation: the evaluation transform
// over the one the model carries (its file, timm's config.json beside it, or its preset).
inline void add_preprocess_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--mean", o.mean, "Per-channel mean in [0, 1] units, e.g. 0.5,0.5,0.5")
      ->group("Preprocessing (default: the model's)");
  cmd->add_option("--std", o.std_dev, "Per-channel std, e.g. 0.5,0.5,0.5")
      ->group("Preprocessing (default: the model's)");
  cmd->add_option("--crop-pct", o.crop_pct,
                  "Resize to size / crop_pct, then crop (timm's crop_pct)")
      ->check(CLI::Range(PreprocessConfig::kMinCropPct, PreprocessConfig::kMaxCropPct))
      ->group("Preprocessing (default: the model's)");
  cmd->add_option("--crop-mode", o.crop_mode, "center (keep the aspect ratio) or squash")
      ->check(CLI::IsMember({"center", "squash"}))
      ->group("Preprocessing (default: the model's)");
  cmd->add_option("--interpolation", o.interpolation, "Resize filter: bicubic or bilinear")
      ->check(CLI::IsMember({"bicubic", "bilinear"}))
      ->group("Preprocessing (default: the model's)");
}

// Adds --precision (the inference precision of the linear layers, see vit/models/model.h).
inline void add_precision_option(CLI::App* cmd, std::string& precision) {
  std::vector<std::string> names;
  for (Precision p : kPrecisions) names.push_back(precision_name(p));
  cmd->add_option("--precision", precision,
                  "Linear layers in f32, bf16 (needs avx512_bf16/AMX), bf16-emulated (bf16 "
                  "numbers on any CPU, for measuring their accuracy) or int8 (dynamic "
                  "quantisation: per-channel weights, per-token inputs)")
      ->check(CLI::IsMember(names))
      ->capture_default_str();
}

}  // namespace vitpe::app
