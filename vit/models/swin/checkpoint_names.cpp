// The Swin family's foreign checkpoints: timm's SwinTransformer(V2) state dicts (>= 0.9: our
// names; older timm and Microsoft's: merging at the end of stages, head.weight) and
// torchvision's swin_* / swin_v2_*; their renaming, the q/v biases, the config read off the
// tensors and the preprocessing their weights were published with.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ops/util.h"
#include "vit/models/swin/swin_family.h"

namespace vitpe::swin_family {

namespace {

// ---- names
// ----------------------------------------------------------------------------------------

// Merging at the end of stage i becomes merging at the start of stage i + 1.
std::string timm_old_name(const std::string& name) {
  auto p = split(name, '.');
  if (p.size() > 3 && p[0] == "layers" && is_digits(p[1]) && p[2] == "downsample") {
    return "layers." + std::to_string(std::stoi(p[1]) + 1) + ".downsample." + join(p, ".", 3);
  }
  if (starts_with(name, "head.") && !starts_with(name, "head.fc.")) {
    return "head.fc." + name.substr(5);
  }
  return name;
}

std::string torchvision_name(const std::string& name) {
  if (starts_with(name, "features.0.0.")) return "patch_embed.proj." + name.substr(13);
  if (starts_with(name, "features.0.2.")) return "patch_embed.norm." + name.substr(13);
  if (starts_with(name, "head.")) return "head.fc." + name.substr(5);
  auto p = split(name, '.');
  if (p.size() > 2 && p[0] == "features" && is_digits(p[1])) {
    const int f = std::stoi(p[1]);
    if (f % 2 == 1 && is_digits(p[2])) {  // stage (f - 1) / 2, block p[2]
      std::string rest = join(p, ".", 3);
      if (starts_with(rest, "mlp.0.")) rest = "mlp.fc1." + rest.substr(6);
      if (starts_with(rest, "mlp.3.")) rest = "mlp.fc2." + rest.substr(6);
      return "layers." + std::to_string((f - 1) / 2) + ".blocks." + p[2] + "." + rest;
    }
    if (f % 2 == 0 && f > 0) {  // merging after stage f/2 - 1 = before stage f/2
      return "layers." + std::to_string(f / 2) + ".downsample." + join(p, ".", 2);
    }
  }
  return name;
}

// torchvision's Swin V2 stores a full qkv bias but zeroes its key third in every forward (the
// paper's attention has no key bias): so do we, once, on load. Blocks are told by logit_scale.
void zero_v2_key_bias(TensorMap& tensors, const std::string&) {
  for (auto& [name, t] : tensors) {
    if (!ends_with(name, ".attn.qkv.bias")) continue;
    const std::string attn = name.substr(0, name.size() - 8);  // "...attn."
    if (!tensors.count(attn + "logit_scale") || t.ndim() != 1 || t.size(0) % 3) continue;
    Tensor f = t.dtype() == DType::f32 ? t.clone() : t.to(DType::f32);
    const int64_t D = f.size(0) / 3;
    std::memset(f.f32() + D, 0, D * sizeof(float));
    t = f;
  }
}

// ---- the config read off the tensors
// -------------------------------------------------------------

// Depths from the blocks present, heads and window from the bias tables.
void infer_swin(InferredConfig& out, const TensorSet& ts, const InferHints& hints) {
  ModelConfig& c = out.config;
  std::vector<std::string>& notes = out.notes;
  SwinArch& a = c.swin();
  a.eps = 1e-5f;
  c.encoding = "relbias";
  a.depths.clear();
  a.stage_heads.clear();
  // Swin V2 (timm's swinv2_*): a temperature per head instead of a bias table, and the cpb MLP.
  a.v2 = ts.has("layers.0.blocks.0.attn.logit_scale");
  if (a.v2) {
    const int64_t hidden = ts.need("layers.0.blocks.0.attn.cpb_mlp.0.weight").size(0);
    c.encoding = hidden == 512 ? "cpb" : "cpb:hidden=" + std::to_string(hidden);
  }
  for (int64_t s = 0;; ++s) {
    const std::string prefix = "layers." + std::to_string(s) + ".blocks.";
    const int64_t n = count_blocks(ts.names, prefix);
    if (n == 0) break;
    a.depths.push_back(n);
    if (a.v2) {
      a.stage_heads.push_back(ts.need(prefix + "0.attn.logit_scale").size(0));  // [H, 1, 1]
      continue;
    }
    const Tensor& table = ts.need(prefix + "0.attn.relative_position_bias_table");
    a.stage_heads.push_back(table.size(1));
    const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(table.size(0))));
    if (s == 0) a.window = (side + 1) / 2;
  }
  if (a.depths.empty()) throw std::runtime_error(ts.path + ": no Swin blocks found");
  const int64_t mlp_dim = ts.need("layers.0.blocks.0.mlp.fc1.weight").size(0);
  a.mlp_ratio = static_cast<float>(mlp_dim) / static_cast<float>(a.dim);
  if (a.v2) {
    // Nothing in a V2 file holds the window or the size: timm's most common V2 sizes.
    a.window = hints.window ? hints.window : 8;
    const int64_t size = 8 * c.patch * (int64_t{1} << (a.depths.size() - 1));
    if (!hints.img_rows && size <= 16384) c.img_rows = c.img_cols = size;
    if (!hints.window) {
      out.unsettled.push_back(
          {"Swin V2's window (not stored in the file): 8 assumed (timm's swinv2_*_window8_" +
               std::to_string(size) + ")",
           "--window N, or --preset with the model's timm name (e.g. swinv2_tiny_window16_256), "
           "or timm's config.json beside the file"});
    }
    if (!hints.img_rows) {
      notes.push_back("image size not stored in the file: " + std::to_string(c.img_rows) + "x" +
                      std::to_string(c.img_cols) +
                      " assumed (timm's V2 size); --img-size to change");
    }
    return;
  }
  if (hints.window && hints.window != a.window) {
    throw std::runtime_error(ts.path + ": --window " + std::to_string(hints.window) +
                             ", but the relative position tables are for window " +
                             std::to_string(a.window));
  }
  notes.push_back(
      "config inferred from tensor shapes (Swin: depths, heads and window from "
      "the bias tables)");
  if (!hints.img_rows) {
    // Not stored; timm's Swin sizes put the last stage's grid at the window (7 x 32 = 224 for
    // window 7, 12 x 32 = 384 for window 12), which its unclamped bias table then confirms.
    const int64_t stages = static_cast<int64_t>(a.depths.size());
    const int64_t last_side = static_cast<int64_t>(
        std::llround(std::sqrt(ts.need("layers." + std::to_string(stages - 1) +
                                       ".blocks.0.attn.relative_position_bias_table")
                                   .size(0))));
    const int64_t size = a.window * c.patch * (int64_t{1} << (stages - 1));
    if ((last_side + 1) / 2 == a.window && size <= 16384) {
      c.img_rows = c.img_cols = size;
      notes.push_back("image size not stored in the file: " + std::to_string(size) + "x" +
                      std::to_string(size) + " assumed (the last stage's grid is the window, " +
                      std::to_string(a.window) +
                      ", as in timm's Swin sizes); --img-size to change");
    } else {
      notes.push_back("image size not stored in the file: assumed 224x224");
    }
  }
}

// torchvision's transform for its Swin weights (IMAGENET1K_V1; the resize of each weights'
// transforms(), told apart by width and depths): swin_t 232, swin_s 246, swin_b 238 bicubic,
// crop 224; swin_v2_{t,s,b}: crop 256 of 260, 260, 272.
void torchvision_preprocessing(ModelConfig& c, std::vector<std::string>& notes) {
  if (c.channels != 3) return;  // no published statistics; 0.5 set above
  const SwinArch& a = c.swin();
  const bool deep = a.depths.size() == 4 && a.depths[2] == 18;
  int64_t resize = a.dim == 128 ? 238 : deep ? 246 : 232, crop = 224;
  std::string name = a.dim == 128 ? "swin_b" : deep ? "swin_s" : "swin_t";
  if (a.v2) {
    crop = 256;
    resize = a.dim == 128 ? 272 : 260;
    name = a.dim == 128 ? "swin_v2_b" : deep ? "swin_v2_s" : "swin_v2_t";
  }
  c.preprocess.crop_pct = static_cast<double>(crop) / static_cast<double>(resize);
  c.preprocess.interpolation = Interpolation::bicubic;
  notes.push_back("preprocessing: torchvision's " + name + " IMAGENET1K_V1 transform (resize " +
                  std::to_string(resize) + " bicubic, centre crop " + std::to_string(crop) +
                  ", ImageNet mean/std; the same ratio at other sizes)");
}

// timm's Swin weights: ImageNet statistics, crop 0.9 at 224, 1.0 at 384 (window 12), bicubic.
void timm_preprocessing(ModelConfig& c, std::vector<std::string>& notes) {
  if (c.channels != 3) return;
  c.preprocess.crop_pct = c.img_rows >= 384 ? 1.0 : 0.9;
  notes.push_back(std::string("preprocessing: timm's for Swin (ImageNet mean/std, crop ") +
                  (c.preprocess.crop_pct == 1.0 ? "1.0" : "0.9") + ", bicubic)");
}

InferredConfig infer(const TensorMap& tensors, const InferHints& hints, const std::string& path,
                     bool torchvision) {
  const TensorSet ts(tensors, path);
  InferredConfig out;
  out.config = blank();
  out.config.swin().dim = infer_common(out.config, ts, "head.fc.weight", hints);
  infer_swin(out, ts, hints);
  if (torchvision) {
    torchvision_preprocessing(out.config, out.notes);
  } else {
    timm_preprocessing(out.config, out.notes);
  }
  return out;
}

bool has_name(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

}  // namespace

std::vector<CheckpointDialect> dialects() {
  CheckpointDialect tv;
  tv.name = "torchvision Swin";
  tv.recognise = [](const std::vector<std::string>& names) {
    return any_starts_with(names, "features.0.0.") ? 1 : 0;
  };
  tv.map_name = torchvision_name;
  tv.prepare = zero_v2_key_bias;
  tv.infer = [](const TensorMap& t, const InferHints& h, const std::string& p) {
    return infer(t, h, p, true);
  };
  auto timm_infer = [](const TensorMap& t, const InferHints& h, const std::string& p) {
    return infer(t, h, p, false);
  };
  CheckpointDialect old;
  old.name = "timm Swin (< 0.9 / Microsoft)";
  old.recognise = [](const std::vector<std::string>& names) {
    // Merging at the end of stage 0, or the classifier as head.weight: outbids timm >= 0.9.
    return any_starts_with(names, "layers.") &&
                   (has_name(names, "layers.0.downsample.reduction.weight") ||
                    has_name(names, "head.weight"))
               ? 2
               : 0;
  };
  old.map_name = timm_old_name;
  old.prepare = merge_qv_bias;
  old.infer = timm_infer;
  CheckpointDialect timm;
  timm.name = "timm Swin (>= 0.9)";
  timm.recognise = [](const std::vector<std::string>& names) {
    return any_starts_with(names, "layers.") ? 1 : 0;
  };
  timm.map_name = [](const std::string& n) { return n; };
  timm.prepare = merge_qv_bias;
  timm.infer = timm_infer;
  return {tv, old, timm};
}

void check_tensors(const ModelConfig& c, const TensorMap& tensors, const std::string& path) {
  const TensorSet ts(tensors, path);
  const SwinArch& a = c.swin();
  check_common_tensors(c, a.dim, ts, "head.fc.weight");
  int64_t stages = 0;
  while (count_blocks(ts.names, "layers." + std::to_string(stages) + ".blocks.") > 0) ++stages;
  check_matches(path, "Swin stages", static_cast<int64_t>(a.depths.size()), stages);
  for (int64_t s = 0; s < stages; ++s) {
    check_matches(path, "blocks in stage " + std::to_string(s), a.depths[s],
                  count_blocks(ts.names, "layers." + std::to_string(s) + ".blocks."));
  }
}

}  // namespace vitpe::swin_family
