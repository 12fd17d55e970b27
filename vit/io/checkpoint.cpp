#include "vit/io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "ops/json_limits.h"
#include "ops/util.h"
#include "vit/io/safetensors.h"
#include "vitpe/vitpe_version.h"

namespace vitpe {

const char* checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::vitpe:
      return "vitpe";
    case CheckpointFormat::timm_vit:
      return "timm ViT";
    case CheckpointFormat::torchvision_vit:
      return "torchvision ViT";
    case CheckpointFormat::timm_swin:
      return "timm Swin (>= 0.9)";
    case CheckpointFormat::timm_swin_old:
      return "timm Swin (< 0.9 / Microsoft)";
    case CheckpointFormat::torchvision_swin:
      return "torchvision Swin";
  }
  return "?";
}

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool has(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// torchvision block-internal names -> timm.
std::string tv_block_part(const std::string& rest) {
  static const std::vector<std::pair<std::string, std::string>> map = {
      {"ln_1.", "norm1."},
      {"ln_2.", "norm2."},
      {"self_attention.in_proj_weight", "attn.qkv.weight"},
      {"self_attention.in_proj_bias", "attn.qkv.bias"},
      {"self_attention.out_proj.", "attn.proj."},
      {"mlp.0.", "mlp.fc1."},
      {"mlp.3.", "mlp.fc2."},
      {"mlp.linear_1.", "mlp.fc1."},
      {"mlp.linear_2.", "mlp.fc2."},
  };
  for (const auto& [from, to] : map) {
    if (starts_with(rest, from)) return to + rest.substr(from.size());
  }
  return rest;
}

bool is_derived_buffer(const std::string& name) {
  return ends_with(name, "relative_position_index") || ends_with(name, "attn_mask") ||
         ends_with(name, "relative_coords_table");
}

Shape squeeze_leading(const Shape& s) {
  std::vector<int64_t> v = s.vec();
  while (v.size() > 1 && v.front() == 1) v.erase(v.begin());
  return Shape(v);
}

}  // namespace

CheckpointFormat detect_checkpoint_format(const std::vector<std::string>& names,
                                          const std::map<std::string, std::string>& metadata) {
  if (metadata.count("vitpe.config")) return CheckpointFormat::vitpe;
  bool tv_vit = false, tv_swin = false, timm_vit = false, swin = false;
  for (const auto& n : names) {
    if (starts_with(n, "encoder.layers.") || n == "conv_proj.weight") tv_vit = true;
    if (starts_with(n, "features.0.0.")) tv_swin = true;
    if (starts_with(n, "blocks.")) timm_vit = true;
    if (starts_with(n, "layers.")) swin = true;
  }
  if (tv_vit) return CheckpointFormat::torchvision_vit;
  if (tv_swin) return CheckpointFormat::torchvision_swin;
  if (swin) {
    return has(names, "layers.0.downsample.reduction.weight") || has(names, "head.weight")
               ? CheckpointFormat::timm_swin_old
               : CheckpointFormat::timm_swin;
  }
  if (timm_vit) return CheckpointFormat::timm_vit;
  throw std::runtime_error(
      "unrecognised checkpoint: no vitpe metadata and none of the timm/torchvision ViT or Swin "
      "tensor names (e.g. 'blocks.0.attn.qkv.weight', 'encoder.layers.encoder_layer_0...', "
      "'layers.0.blocks.0...', 'features.0.0.weight')");
}

std::string map_checkpoint_name(const std::string& name, CheckpointFormat format) {
  if (is_derived_buffer(name)) return "";
  switch (format) {
    case CheckpointFormat::vitpe:
    case CheckpointFormat::timm_swin:
      return name;
    case CheckpointFormat::timm_vit: {
      // BEiT (timm's Beit): layer scale as gamma_1 / gamma_2 of each block.
      auto p = split(name, '.');
      if (p.size() == 3 && p[0] == "blocks" && is_number(p[1]) &&
          (p[2] == "gamma_1" || p[2] == "gamma_2")) {
        return "blocks." + p[1] + (p[2] == "gamma_1" ? ".ls1.gamma" : ".ls2.gamma");
      }
      return name;
    }
    case CheckpointFormat::timm_swin_old: {
      // Merging at the end of stage i becomes merging at the start of stage i + 1.
      auto p = split(name, '.');
      if (p.size() > 3 && p[0] == "layers" && is_number(p[1]) && p[2] == "downsample") {
        return "layers." + std::to_string(std::stoi(p[1]) + 1) + ".downsample." + join(p, ".", 3);
      }
      if (starts_with(name, "head.") && !starts_with(name, "head.fc.")) {
        return "head.fc." + name.substr(5);
      }
      return name;
    }
    case CheckpointFormat::torchvision_vit: {
      if (name == "class_token") return "cls_token";
      if (starts_with(name, "conv_proj.")) return "patch_embed.proj." + name.substr(10);
      if (name == "encoder.pos_embedding") return "pos_embed";
      if (starts_with(name, "encoder.ln.")) return "norm." + name.substr(11);
      if (starts_with(name, "heads.head.")) return "head." + name.substr(11);
      const std::string layer = "encoder.layers.encoder_layer_";
      if (starts_with(name, layer)) {
        std::string rest = name.substr(layer.size());
        size_t dot = rest.find('.');
        return "blocks." + rest.substr(0, dot) + "." + tv_block_part(rest.substr(dot + 1));
      }
      return name;
    }
    case CheckpointFormat::torchvision_swin: {
      if (starts_with(name, "features.0.0.")) return "patch_embed.proj." + name.substr(13);
      if (starts_with(name, "features.0.2.")) return "patch_embed.norm." + name.substr(13);
      if (starts_with(name, "head.")) return "head.fc." + name.substr(5);
      auto p = split(name, '.');
      if (p.size() > 2 && p[0] == "features" && is_number(p[1])) {
        const int f = std::stoi(p[1]);
        if (f % 2 == 1 && is_number(p[2])) {  // stage (f - 1) / 2, block p[2]
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
  }
  return name;
}

void load_params(Model& model, const std::map<std::string, Tensor>& tensors,
                 const std::string& source) {
  std::vector<std::string> missing, misshaped;
  std::set<std::string> used;
  for (Param* p : model.params()) {
    auto it = tensors.find(p->name);
    if (it == tensors.end()) {
      missing.push_back(p->name + " " + p->value.shape().str());
      continue;
    }
    used.insert(p->name);
    const Tensor& t = it->second;
    if (squeeze_leading(t.shape()) != squeeze_leading(p->value.shape())) {
      misshaped.push_back(p->name + ": expected " + p->value.shape().str() + ", found " +
                          t.shape().str());
      continue;
    }
    p->value.copy_from(t.dtype() == DType::f32 ? t : t.to(DType::f32));
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : tensors) {
    if (!used.count(name)) unexpected.push_back(name + " " + t.shape().str());
  }
  if (missing.empty() && misshaped.empty() && unexpected.empty()) return;
  std::ostringstream msg;
  msg << source << ": the checkpoint does not match the model (encoding '"
      << model.config().encoding << "')";
  auto list = [&](const char* title, const std::vector<std::string>& v) {
    if (v.empty()) return;
    msg << "\n  " << title << " (" << v.size() << "):";
    for (size_t i = 0; i < v.size() && i < 20; ++i) msg << "\n    " << v[i];
    if (v.size() > 20) msg << "\n    ... and " << v.size() - 20 << " more";
  };
  list("missing", missing);
  list("unexpected", unexpected);
  list("mis-shaped", misshaped);
  throw std::runtime_error(msg.str());
}

std::vector<std::string> read_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("labels file '" + path + "': cannot be opened");
  std::vector<std::string> labels;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      // A trailing empty line is fine; one in the middle shifts every class after it.
      if (in.peek() == EOF) break;
      throw std::runtime_error("labels file '" + path + "': line " + std::to_string(n) +
                               " is empty (expected one class name per line)");
    }
    labels.push_back(line);
  }
  // An empty file would silently drop the checkpoint's own names.
  if (labels.empty()) {
    throw std::runtime_error("labels file '" + path +
                             "' is empty (expected one class name per line)");
  }
  return labels;
}

namespace {

// timm's config.json, parsed with a depth limit; throws naming the file and what is wrong.
nlohmann::json read_timm_config_json(const std::string& path) {
  using nlohmann::json;
  auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error("config.json '" + path + "': " + what);
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail("not a regular file");
  // timm's files are a few KB (about 30 with 1000 class names).
  if (std::filesystem::file_size(path, ec) > (4u << 20)) fail("larger than 4 MiB");
  std::ifstream in(path);
  if (!in) fail("cannot be opened");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j;
  try {
    // timm's layout nests 3 deep (root, pretrained_cfg, input_size); deeper is refused while
    // parsing, before anything recursive sees it.
    j = parse_json_limited(text, JsonLimits{.max_depth = 8});
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  if (!j.is_object() || !j.contains("pretrained_cfg") || !j["pretrained_cfg"].is_object()) {
    fail("expected timm's layout, an object with a \"pretrained_cfg\" object");
  }
  return j;
}

std::string timm_config_architecture(const std::string& path) {
  const nlohmann::json j = read_timm_config_json(path);
  if (!j.contains("architecture")) return "";
  if (!j["architecture"].is_string()) {
    throw std::runtime_error("config.json '" + path + "': architecture: expected a string, found " +
                             j["architecture"].dump().substr(0, 40));
  }
  return j["architecture"].get<std::string>();
}

}  // namespace

std::string apply_timm_config_json(ModelConfig& c, const std::string& path) {
  using nlohmann::json;
  auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error("config.json '" + path + "': " + what);
  };
  const json j = read_timm_config_json(path);
  const json& cfg = j["pretrained_cfg"];
  std::vector<std::string> set;
  auto number = [&](const json& v, const std::string& field) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      fail(field + ": expected a number, found " + v.dump().substr(0, 40));
    }
    return v.get<double>();
  };
  auto text_of = [&](const json& v, const std::string& field) {
    if (!v.is_string()) fail(field + ": expected a string, found " + v.dump().substr(0, 40));
    return v.get<std::string>();
  };
  auto per_channel = [&](const json& v, const std::string& field) {
    if (!v.is_array() || static_cast<int64_t>(v.size()) != c.channels) {
      fail(field + ": expected " + std::to_string(c.channels) + " numbers (the weights have " +
           std::to_string(c.channels) + " input channels), found " + v.dump().substr(0, 60));
    }
    std::vector<float> out;
    for (const json& x : v) out.push_back(static_cast<float>(number(x, field)));
    return out;
  };
  if (j.contains("num_classes") && j["num_classes"] != c.classes) {
    fail("num_classes is " + j["num_classes"].dump().substr(0, 20) + ", the weights have " +
         std::to_string(c.classes) + " classes");
  }
  if (j.contains("architecture")) c.name = text_of(j["architecture"], "architecture");
  if (cfg.contains("input_size")) {
    const json& s = cfg["input_size"];
    if (!s.is_array() || s.size() != 3 || !s[0].is_number_integer() || !s[1].is_number_integer() ||
        !s[2].is_number_integer()) {
      fail("pretrained_cfg.input_size: expected [channels, height, width], found " +
           s.dump().substr(0, 60));
    }
    if (s[0].get<int64_t>() != c.channels) {
      fail("pretrained_cfg.input_size has " + s[0].dump() + " channels, the weights " +
           std::to_string(c.channels));
    }
    c.img_rows = s[1].get<int64_t>();
    c.img_cols = s[2].get<int64_t>();
    set.push_back("input " + std::to_string(c.img_rows) + "x" + std::to_string(c.img_cols));
  }
  if (cfg.contains("mean")) {
    c.mean = per_channel(cfg["mean"], "pretrained_cfg.mean");
    set.push_back("mean");
  }
  if (cfg.contains("std")) {
    c.std_dev = per_channel(cfg["std"], "pretrained_cfg.std");
    set.push_back("std");
  }
  if (cfg.contains("crop_pct")) {
    c.crop_pct = number(cfg["crop_pct"], "pretrained_cfg.crop_pct");
    std::ostringstream crop;
    crop << c.crop_pct;
    set.push_back("crop_pct " + crop.str());
  }
  if (cfg.contains("crop_mode")) {
    c.crop_mode = text_of(cfg["crop_mode"], "pretrained_cfg.crop_mode");
    set.push_back("crop_mode " + c.crop_mode);
  }
  if (cfg.contains("interpolation")) {
    c.interpolation = text_of(cfg["interpolation"], "pretrained_cfg.interpolation");
    set.push_back(c.interpolation);
  }
  if (j.contains("label_names")) {
    const json& l = j["label_names"];
    if (!l.is_array() || static_cast<int64_t>(l.size()) != c.classes) {
      fail("label_names: expected " + std::to_string(c.classes) + " names, found " +
           (l.is_array() ? std::to_string(l.size()) + " names" : l.dump().substr(0, 40)));
    }
    c.labels.clear();
    for (const json& x : l) c.labels.push_back(text_of(x, "label_names"));
    set.push_back(std::to_string(c.labels.size()) + " class names");
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  return set.empty() ? std::string("nothing") : join(set, ", ");
}

namespace {

int64_t count_indexed(const std::vector<std::string>& names, const std::string& prefix) {
  int64_t n = 0;
  while (has(names, prefix + std::to_string(n) + ".norm1.weight")) ++n;
  return n;
}

// A foreign checkpoint's tensors (mapped to our names), with errors that name the file.
struct TensorSet {
  const std::map<std::string, Tensor>& t;
  const std::string& path;
  std::vector<std::string> names;

  TensorSet(const std::map<std::string, Tensor>& tensors, const std::string& p)
      : t(tensors), path(p) {
    for (const auto& [n, v] : t) names.push_back(n);
  }
  bool has(const std::string& name) const { return t.count(name) > 0; }
  const Tensor& need(const std::string& name) const {
    auto it = t.find(name);
    if (it == t.end()) {
      throw std::runtime_error(path + ": cannot infer the model: tensor '" + name + "' is missing");
    }
    return it->second;
  }
};

// Swin: depths from the blocks present, heads and window from the bias tables.
void infer_swin(ModelConfig& c, const TensorSet& ts, const LoadOptions& opts,
                std::vector<std::string>& notes) {
  c.eps = 1e-5f;
  c.pool = Pool::avg;
  c.class_token = false;
  c.encoding = "relbias";
  // Swin V2 (timm's swinv2_*): a temperature per head instead of a bias table, and the cpb MLP.
  c.swin_v2 = ts.has("layers.0.blocks.0.attn.logit_scale");
  if (c.swin_v2) {
    const int64_t hidden = ts.need("layers.0.blocks.0.attn.cpb_mlp.0.weight").size(0);
    c.encoding = hidden == 512 ? "cpb" : "cpb:hidden=" + std::to_string(hidden);
  }
  for (int64_t s = 0;; ++s) {
    const std::string prefix = "layers." + std::to_string(s) + ".blocks.";
    int64_t n = count_indexed(ts.names, prefix);
    if (n == 0) break;
    c.depths.push_back(n);
    if (c.swin_v2) {
      c.stage_heads.push_back(ts.need(prefix + "0.attn.logit_scale").size(0));  // [H, 1, 1]
      continue;
    }
    const Tensor& table = ts.need(prefix + "0.attn.relative_position_bias_table");
    c.stage_heads.push_back(table.size(1));
    const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(table.size(0))));
    if (s == 0) c.window = (side + 1) / 2;
  }
  if (c.depths.empty()) throw std::runtime_error(ts.path + ": no Swin blocks found");
  c.heads = c.stage_heads[0];
  c.mlp_dim = ts.need("layers.0.blocks.0.mlp.fc1.weight").size(0);
  c.mlp_ratio = static_cast<float>(c.mlp_dim) / c.dim;
  if (c.swin_v2) {
    // Nothing in a V2 file holds the window or the size: timm's most common V2 sizes.
    c.window = opts.window ? opts.window : 8;
    const int64_t size = 8 * c.patch * (int64_t{1} << (c.depths.size() - 1));
    if (!opts.img_rows && size <= 16384) c.img_rows = c.img_cols = size;
    if (!opts.window) {
      notes.push_back(
          "Swin V2: window not stored in the file: 8 assumed (timm's swinv2_*_window8_" +
          std::to_string(size) +
          "); for other windows pass --window, or --preset with the model's timm name (e.g. "
          "swinv2_tiny_window16_256), or keep timm's config.json beside the file");
    }
    if (!opts.img_rows) {
      notes.push_back("image size not stored in the file: " + std::to_string(c.img_rows) + "x" +
                      std::to_string(c.img_cols) +
                      " assumed (timm's V2 size); --img-size to change");
    }
    return;
  }
  if (opts.window && opts.window != c.window) {
    throw std::runtime_error(ts.path + ": --window " + std::to_string(opts.window) +
                             ", but the relative position tables are for window " +
                             std::to_string(c.window));
  }
  notes.push_back(
      "config inferred from tensor shapes (Swin: depths, heads and window from "
      "the bias tables)");
  if (!opts.img_rows) {
    // Not stored; timm's Swin sizes put the last stage's grid at the window (7 x 32 = 224 for
    // window 7, 12 x 32 = 384 for window 12), which its unclamped bias table then confirms.
    const int64_t stages = static_cast<int64_t>(c.depths.size());
    const int64_t last_side = static_cast<int64_t>(
        std::llround(std::sqrt(ts.need("layers." + std::to_string(stages - 1) +
                                       ".blocks.0.attn.relative_position_bias_table")
                                   .size(0))));
    const int64_t size = c.window * c.patch * (int64_t{1} << (stages - 1));
    if ((last_side + 1) / 2 == c.window && size <= 16384) {
      c.img_rows = c.img_cols = size;
      notes.push_back("image size not stored in the file: " + std::to_string(size) + "x" +
                      std::to_string(size) + " assumed (the last stage's grid is the window, " +
                      std::to_string(c.window) +
                      ", as in timm's Swin sizes); --img-size to change");
    } else {
      notes.push_back("image size not stored in the file: assumed 224x224");
    }
  }
}

// ViT: depth from the blocks, class token, pooling and encoding from the tensors present, the
// image size from pos_embed's rows (a square grid) unless given.
void infer_vit(ModelConfig& c, const TensorSet& ts, const LoadOptions& opts,
               std::vector<std::string>& notes) {
  c.eps = 1e-6f;
  c.depth = count_indexed(ts.names, "blocks.");
  c.mlp_dim = ts.need("blocks.0.mlp.fc1.weight").size(0);
  // EVA-02's SwiGLU: fc1 makes twice the width fc2 reads (gate and value halves).
  const int64_t fc2_in = ts.need("blocks.0.mlp.fc2.weight").size(1);
  if (fc2_in * 2 == c.mlp_dim) {
    c.mlp = "swiglu";
    c.mlp_dim = fc2_in;
    c.mlp_norm = ts.has("blocks.0.mlp.norm.weight");
    notes.push_back(std::string("SwiGLU MLP (EVA-02)") +
                    (c.mlp_norm ? " with a norm before fc2" : "") +
                    "; EVA-02 computes its RoPE in code: pass --preset with the model's timm name "
                    "(e.g. eva02_small_patch14_336) for it");
  }
  c.class_token = ts.has("cls_token");
  if (ts.has("dist_token")) {
    c.dist_token = true;
    notes.push_back(
        "distillation token and head_dist (DeiT distilled: the logits are the mean "
        "of both heads, as timm at inference)");
  }
  if (ts.has("reg_token")) {
    const Shape reg = ts.need("reg_token").shape();
    if (reg.size() != 3 || reg[0] != 1 || reg[1] < 1 || reg[1] > 64) {
      throw std::runtime_error(
          ts.path + ": reg_token: expected [1, R, D] with 1 <= R <= 64, found " + reg.str());
    }
    c.reg_tokens = reg[1];
    notes.push_back(std::to_string(c.reg_tokens) + " register tokens (reg_token)");
  }
  c.pool = ts.has("fc_norm.weight") ? Pool::avg : Pool::cls;
  const bool abs = ts.has("pos_embed");
  const bool rel = ts.has("blocks.0.attn.relative_position_bias_table");
  const bool mixed = ts.has("blocks.0.attn.rope.freqs");  // timm's Eva, rope_type 'mixed'
  const std::string token_part = abs ? "learned1d" : "";
  // A ViT with relative tables is BEiT's: met at another size, its tables resize as timm's.
  const std::string attn_part = rel ? "relbias:resize=beit" : mixed ? "rope-mixed" : "";
  c.encoding = token_part.empty() ? (attn_part.empty() ? "none" : attn_part)
                                  : (attn_part.empty() ? token_part : token_part + "+" + attn_part);
  if (mixed) notes.push_back("RoPE-Mixed frequencies (rope.freqs, timm's Eva RoPE-ViT)");
  if (!abs && !rel && !mixed && opts.encoding.empty()) {
    notes.push_back(
        "no position tensors in the file: encoding 'none' assumed. timm's Eva RoPE-ViTs "
        "(vit_*_rope_*) compute their axial RoPE in code: pass --preset with the model's timm "
        "name, or --encoding rope-axial");
  }
  if (opts.heads) {
    c.heads = opts.heads;
  } else if (mixed) {
    c.heads = ts.need("blocks.0.attn.rope.freqs").size(1);  // [2, H, hd/2]
  } else {
    c.heads = c.dim % 64 == 0 ? c.dim / 64 : 1;
    notes.push_back("heads not stored in the file: assumed head dim 64 (" +
                    std::to_string(c.heads) + " heads); pass --heads to override");
  }
  if (ts.has("blocks.0.ls1.gamma")) {
    c.layer_scale = 1e-6;  // timm's DeiT-III init_values; the file's gammas are loaded
    notes.push_back("layer scale (blocks.N.ls1/ls2.gamma, as timm's DeiT-III)");
  }
  if (!abs && rel && !opts.img_rows) {
    // BEiT: no position table; the first block's relative table covers a (2M-1) x (2M-1) grid
    // of offsets (plus three class entries with a class token): a square M x M patch grid.
    const int64_t rows = ts.need("blocks.0.attn.relative_position_bias_table").size(0) -
                         (c.prefix_tokens() > 0 ? 3 : 0);
    const int64_t side =
        rows > 0 ? static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(rows)))) : 0;
    if (side < 1 || side * side != rows || side % 2 == 0) {
      throw std::runtime_error(ts.path + ": blocks.0.attn.relative_position_bias_table has " +
                               std::to_string(rows) +
                               " offset rows, not (2M-1)^2 of a square grid: pass the image size");
    }
    c.img_rows = c.img_cols = (side + 1) / 2 * c.patch;
    notes.push_back("image size " + std::to_string(c.img_rows) +
                    " inferred from the relative position table");
  }
  if (abs) {
    // pos_embed rows: the patch grid, plus a class row unless timm's no_embed_class (DeiT-III)
    // left it out. Only a square grid can be inferred; with the size given, the rows decide.
    const int64_t rows = squeeze_leading(ts.need("pos_embed").shape())[0];
    auto square_side = [](int64_t n) {
      const int64_t side =
          n > 0 ? static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n)))) : 0;
      return side > 0 && side * side == n ? side : int64_t{0};
    };
    const int64_t P = c.prefix_tokens();
    int64_t side = square_side(rows - P);
    if (opts.img_rows) {
      const int64_t grid =
          (opts.img_rows / c.patch) * ((opts.img_cols ? opts.img_cols : opts.img_rows) / c.patch);
      c.no_embed_class = P > 0 && rows == grid;
    } else if (side == 0 && P > 0 && square_side(rows) > 0) {
      side = square_side(rows);
      c.no_embed_class = true;
    }
    if (c.no_embed_class) {
      notes.push_back(
          "pos_embed has no rows for the class or register tokens (timm's "
          "no_embed_class, as DeiT-III)");
    }
    if (!opts.img_rows) {
      if (side == 0) {
        throw std::runtime_error(
            ts.path + ": pos_embed has " + std::to_string(rows) + " rows, not a square grid" +
            (c.class_token ? " with or without a class row" : "") + ": pass the image size");
      }
      c.img_rows = c.img_cols = side * c.patch;
      notes.push_back("image size " + std::to_string(c.img_rows) + " inferred from pos_embed");
    }
  }
  notes.push_back("config inferred from tensor shapes");
}

// Before a model is built from a config that came with the file (our metadata, or a preset),
// the config's size must be the tensors' size: the patch embedding, the classes and the number
// of blocks per stage are read off the file, so no config can make the model allocate more than
// the file holds. Throws naming the file, the field, the config's value and the file's.
void check_config_against_tensors(const ModelConfig& c, const TensorSet& ts) {
  auto mismatch = [&](const std::string& what, int64_t config, int64_t file) {
    if (config != file) {
      throw std::runtime_error(ts.path + ": the model config says " + what + " " +
                               std::to_string(config) + ", the tensors say " +
                               std::to_string(file));
    }
  };
  const Tensor& pw = ts.need("patch_embed.proj.weight");
  if (pw.ndim() != 4) {
    throw std::runtime_error(ts.path + ": patch_embed.proj.weight: expected [D, C, p, p], found " +
                             pw.shape().str());
  }
  mismatch("dim", c.dim, pw.size(0));
  mismatch("channels", c.channels, pw.size(1));
  mismatch("patch", c.patch, pw.size(2));
  const bool swin = c.kind == ModelKind::swin;
  mismatch("classes", c.classes, ts.need(swin ? "head.fc.weight" : "head.weight").size(0));
  if (!swin) {
    mismatch("depth", c.depth, count_indexed(ts.names, "blocks."));
    mismatch("mlp_dim", c.mlp_dim, ts.need("blocks.0.mlp.fc2.weight").size(1));
    return;
  }
  int64_t stages = 0;
  while (count_indexed(ts.names, "layers." + std::to_string(stages) + ".blocks.") > 0) ++stages;
  mismatch("Swin stages", static_cast<int64_t>(c.depths.size()), stages);
  for (int64_t s = 0; s < stages; ++s) {
    mismatch("blocks in stage " + std::to_string(s), c.depths[s],
             count_indexed(ts.names, "layers." + std::to_string(s) + ".blocks."));
  }
}

// The evaluation transform that goes with a foreign file's weights when nothing names them:
// torchvision's for its architectures (the resize of each IMAGENET1K_V1 weights' transforms(),
// told apart by width, patch and depths; interpolation as torchvision), timm's defaults for timm
// files (all of timm's Swin weights: ImageNet statistics, crop 0.9, bicubic; ViT weights differ
// by tag, so the note says how to give them).
void foreign_preprocessing(ModelConfig& c, CheckpointFormat format,
                           std::vector<std::string>& notes) {
  if (c.channels != 3) return;  // no published statistics; 0.5 set above
  if (format == CheckpointFormat::torchvision_vit || format == CheckpointFormat::torchvision_swin) {
    const bool vit = format == CheckpointFormat::torchvision_vit;
    int64_t resize = 256;  // vit_b_16, vit_b_32, vit_l_32
    std::string name = vit ? "vit_b_16" : "swin_t";
    if (vit && c.dim == 1024 && c.patch == 16) resize = 242, name = "vit_l_16";
    int64_t crop = 224;
    if (!vit) {
      const bool deep = c.depths.size() == 4 && c.depths[2] == 18;
      resize = c.dim == 128 ? 238 : deep ? 246 : 232;
      name = c.dim == 128 ? "swin_b" : deep ? "swin_s" : "swin_t";
      if (c.swin_v2) {  // swin_v2_{t,s,b}: crop 256 of 260, 260, 272
        crop = 256;
        resize = c.dim == 128 ? 272 : 260;
        name = c.dim == 128 ? "swin_v2_b" : deep ? "swin_v2_s" : "swin_v2_t";
      }
    }
    c.crop_pct = static_cast<double>(crop) / static_cast<double>(resize);  // crop of `resize`
    c.interpolation = vit ? "bilinear" : "bicubic";
    notes.push_back("preprocessing: torchvision's " + name + " IMAGENET1K_V1 transform (resize " +
                    std::to_string(resize) + " " + c.interpolation + ", centre crop " +
                    std::to_string(crop) + ", ImageNet mean/std; the same ratio at other sizes)");
    return;
  }
  if (c.kind == ModelKind::swin) {
    // timm's Swin weights: crop 0.9 at 224, 1.0 at 384 (window 12).
    c.crop_pct = c.img_rows >= 384 ? 1.0 : 0.9;
    notes.push_back(std::string("preprocessing: timm's for Swin (ImageNet mean/std, crop ") +
                    (c.crop_pct == 1.0 ? "1.0" : "0.9") + ", bicubic)");
    return;
  }
  notes.push_back(
      "preprocessing not stored in the file: ImageNet mean/std, crop 0.875, bicubic; timm's ViT "
      "weights differ by tag (augreg: mean = std = 0.5, crop 0.9): keep timm's config.json beside "
      "the file, or pass --preset, --mean, --std, --crop-pct");
}

// The caller's --mean/--std/--crop-pct/--crop-mode/--interpolation, last (validated with the
// rest of the config).
void apply_preprocess_overrides(ModelConfig& c, const PreprocessOverrides& p,
                                std::vector<std::string>& notes) {
  if (!p.any()) return;
  if (!p.mean.empty()) c.mean = p.mean;
  if (!p.std_dev.empty()) c.std_dev = p.std_dev;
  if (p.crop_pct != 0) c.crop_pct = p.crop_pct;
  if (!p.crop_mode.empty()) c.crop_mode = p.crop_mode;
  if (!p.interpolation.empty()) c.interpolation = p.interpolation;
  notes.push_back("preprocessing overridden by the command line");
}

// Config of a foreign checkpoint from its (mapped) tensors: what every family shares (patch
// embedding, classes, statistics, size), then the family's own.
ModelConfig infer_config(const std::map<std::string, Tensor>& t, CheckpointFormat format,
                         const LoadOptions& opts, std::vector<std::string>& notes,
                         const std::string& path) {
  const TensorSet ts(t, path);
  const bool swin = format == CheckpointFormat::timm_swin ||
                    format == CheckpointFormat::timm_swin_old ||
                    format == CheckpointFormat::torchvision_swin;
  ModelConfig c;
  c.name = "custom";
  c.kind = swin ? ModelKind::swin : ModelKind::vit;
  const Tensor& pw = ts.need("patch_embed.proj.weight");  // [D, C, p, p]
  if (pw.ndim() != 4 || pw.size(2) != pw.size(3)) {
    throw std::runtime_error(path + ": patch_embed.proj.weight: expected [D, C, p, p], found " +
                             pw.shape().str());
  }
  c.dim = pw.size(0);
  c.channels = pw.size(1);
  c.patch = pw.size(2);
  // ImageNet's statistics for RGB (timm's and torchvision's default), 0.5 otherwise.
  c.mean = c.channels == 3 ? kImageNetMean : std::vector<float>(c.channels, 0.5f);
  c.std_dev = c.channels == 3 ? kImageNetStd : std::vector<float>(c.channels, 0.5f);
  c.classes = ts.need(swin ? "head.fc.weight" : "head.weight").size(0);
  c.img_rows = opts.img_rows ? opts.img_rows : 224;
  c.img_cols = opts.img_cols ? opts.img_cols : c.img_rows;
  if (swin) {
    infer_swin(c, ts, opts, notes);
  } else {
    infer_vit(c, ts, opts, notes);
  }
  foreign_preprocessing(c, format, notes);
  return c;
}

}  // namespace

namespace {

// BEiT's, Eva's and Swin V2's attention has a query and a value bias and no key bias
// ("attn.q_bias", "attn.v_bias"; timm adds zeros for the keys): they become the qkv bias
// [q, 0, v] of our attention. A block with only one of them, or with them beside a qkv bias, is
// an error naming it.
void merge_qv_bias(std::map<std::string, Tensor>& tensors, const std::string& path) {
  std::vector<std::string> blocks;
  for (const auto& [name, t] : tensors) {
    if (ends_with(name, ".attn.q_bias")) blocks.push_back(name.substr(0, name.size() - 6));
  }
  for (const std::string& attn : blocks) {  // "blocks.N.attn."
    const Tensor& q = tensors.at(attn + "q_bias");
    auto v = tensors.find(attn + "v_bias");
    if (v == tensors.end()) {
      throw std::runtime_error(path + ": " + attn + "q_bias without " + attn +
                               "v_bias (timm's q/v-bias attention has both)");
    }
    if (tensors.count(attn + "qkv.bias")) {
      throw std::runtime_error(path + ": " + attn + "q_bias beside " + attn + "qkv.bias");
    }
    if (q.ndim() != 1 || v->second.shape() != q.shape()) {
      throw std::runtime_error(path + ": " + attn + "q_bias and v_bias: expected two [D], found " +
                               q.shape().str() + " and " + v->second.shape().str());
    }
    const int64_t D = q.size(0);
    Tensor qkv = Tensor::zeros({3 * D});
    const Tensor qf = q.dtype() == DType::f32 ? q : q.to(DType::f32);
    const Tensor vf = v->second.dtype() == DType::f32 ? v->second : v->second.to(DType::f32);
    std::memcpy(qkv.f32(), qf.f32(), D * sizeof(float));
    std::memcpy(qkv.f32() + 2 * D, vf.f32(), D * sizeof(float));
    tensors.erase(attn + "q_bias");
    tensors.erase(attn + "v_bias");
    tensors.emplace(attn + "qkv.bias", qkv);
  }
}

}  // namespace

// Concatenates tensors along dim 0 (f32), in order.
Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& t : parts) rows += t.size(0);
  std::vector<int64_t> dims = parts[0].shape().vec();
  dims[0] = rows;
  Tensor out = Tensor::empty(Shape(dims));
  int64_t at = 0;
  for (const Tensor& t : parts) {
    const Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32);
    std::memcpy(out.f32() + at, f.f32(), f.numel() * sizeof(float));
    at += f.numel();
  }
  return out;
}

// EVA-02 base and large keep separate projections: attn.q_proj / k_proj / v_proj (k without a
// bias) and the SwiGLU's mlp.fc1_g / fc1_x. They become our fused attn.qkv [3D, D] (bias
// [q, 0, v]) and mlp.fc1 [2 hidden, D] (gate rows first, as timm's GluMlp). A block with only
// some of the parts, or parts of different shapes, is an error naming them.
void fuse_split_projections(std::map<std::string, Tensor>& tensors, const std::string& path) {
  std::vector<std::string> attns, mlps;
  for (const auto& [name, t] : tensors) {
    if (ends_with(name, ".attn.q_proj.weight")) attns.push_back(name.substr(0, name.size() - 13));
    if (ends_with(name, ".mlp.fc1_g.weight")) mlps.push_back(name.substr(0, name.size() - 12));
  }
  auto take = [&](const std::string& name, const std::string& what) {
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw std::runtime_error(path + ": " + name + " missing beside " + what);
    Tensor t = it->second;
    tensors.erase(it);
    return t;
  };
  auto check_same_shape = [&](const std::vector<Tensor>& ts, const std::string& what) {
    for (const Tensor& t : ts) {
      if (t.shape() != ts[0].shape()) {
        throw std::runtime_error(path + ": " + what + ": the parts have different shapes (" +
                                 ts[0].shape().str() + " and " + t.shape().str() + ")");
      }
    }
  };
  for (const std::string& attn : attns) {  // "blocks.N.attn."
    const std::string what = attn + "q_proj.weight";
    std::vector<Tensor> w = {take(attn + "q_proj.weight", what), take(attn + "k_proj.weight", what),
                             take(attn + "v_proj.weight", what)};
    check_same_shape(w, attn + "{q,k,v}_proj.weight");
    tensors.emplace(attn + "qkv.weight", concat_rows(w));
    const bool qb = tensors.count(attn + "q_proj.bias"), vb = tensors.count(attn + "v_proj.bias");
    if (qb || vb || tensors.count(attn + "k_proj.bias")) {
      const int64_t D = w[0].size(0);
      std::vector<Tensor> b;
      for (const char* part : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
        auto it = tensors.find(attn + part);
        b.push_back(it == tensors.end() ? Tensor::zeros({D}) : take(attn + part, what));
      }
      check_same_shape(b, attn + "{q,k,v}_proj.bias");
      tensors.emplace(attn + "qkv.bias", concat_rows(b));
    }
  }
  for (const std::string& mlp : mlps) {  // "blocks.N.mlp."
    const std::string what = mlp + "fc1_g.weight";
    std::vector<Tensor> w = {take(mlp + "fc1_g.weight", what), take(mlp + "fc1_x.weight", what)};
    check_same_shape(w, mlp + "fc1_{g,x}.weight");
    tensors.emplace(mlp + "fc1.weight", concat_rows(w));
    if (tensors.count(mlp + "fc1_g.bias") || tensors.count(mlp + "fc1_x.bias")) {
      std::vector<Tensor> b = {take(mlp + "fc1_g.bias", what), take(mlp + "fc1_x.bias", what)};
      check_same_shape(b, mlp + "fc1_{g,x}.bias");
      tensors.emplace(mlp + "fc1.bias", concat_rows(b));
    }
  }
}

// torchvision's Swin V2 stores a full qkv bias but zeroes its key third in every forward (the
// paper's attention has no key bias): so do we, once, on load. Blocks are told by logit_scale.
void zero_v2_key_bias(std::map<std::string, Tensor>& tensors) {
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

// timm's Eva keeps RoPE-Mixed's frequencies of all blocks in one tensor "rope.freqs" [2, depth,
// H, hd/2]; ours are per block, "blocks.N.attn.rope.freqs" [2, H, hd/2].
void split_eva_rope_freqs(std::map<std::string, Tensor>& tensors, const std::string& path) {
  auto it = tensors.find("rope.freqs");
  if (it == tensors.end()) return;
  const Tensor f = it->second.dtype() == DType::f32 ? it->second : it->second.to(DType::f32);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  const int64_t depth = count_indexed(names, "blocks.");
  if (f.ndim() != 4 || f.size(0) != 2 || f.size(1) != depth || f.size(2) < 1 || f.size(3) < 1) {
    throw std::runtime_error(path + ": rope.freqs: expected [2, depth " + std::to_string(depth) +
                             ", heads, head_dim/2] (timm's RoPE-Mixed), found " + f.shape().str());
  }
  const int64_t H = f.size(2), half = f.size(3), plane = depth * H * half;
  for (int64_t b = 0; b < depth; ++b) {
    Tensor block = Tensor::empty({2, H, half});
    for (int64_t axis = 0; axis < 2; ++axis) {
      std::memcpy(block.f32() + axis * H * half, f.f32() + axis * plane + b * H * half,
                  H * half * sizeof(float));
    }
    tensors.emplace("blocks." + std::to_string(b) + ".attn.rope.freqs", block);
  }
  tensors.erase(it);
}

LoadedModel load_model(const std::string& path_or_preset, const LoadOptions& opts) {
  LoadedModel out;
  if (is_preset(path_or_preset)) {
    ModelConfig c = preset(path_or_preset);
    apply_preprocess_overrides(c, opts.preprocess, out.notes);
    if (!opts.labels_file.empty()) c.labels = read_labels(opts.labels_file);
    out.model = make_model(c, 0);
    out.notes.push_back("preset '" + path_or_preset + "' with random weights (seed 0)");
    return out;
  }
  std::error_code ec;
  if (!std::filesystem::exists(path_or_preset, ec) &&
      path_or_preset.find('/') == std::string::npos &&
      path_or_preset.find('.') == std::string::npos) {
    // Not a file and spelt like a model name: say which presets it is close to.
    const std::vector<std::string> close = closest_presets(path_or_preset);
    throw std::runtime_error("'" + path_or_preset + "' is neither a checkpoint file nor a preset" +
                             (close.empty() ? "" : "; did you mean " + join(close, " or ") + "?") +
                             " (presets: " + join(preset_names(), ", ") + ")");
  }
  SafeTensorsFile file = SafeTensorsFile::open(path_or_preset);
  out.format = detect_checkpoint_format(file.names(), file.metadata());
  std::map<std::string, Tensor> tensors;
  for (const auto& n : file.names()) {
    std::string mapped = map_checkpoint_name(n, out.format);
    if (mapped.empty()) continue;
    if (tensors.count(mapped)) {
      throw std::runtime_error(path_or_preset + ": tensors map to the same name '" + mapped + "'");
    }
    tensors.emplace(mapped, file.get(n));
  }
  if (out.format == CheckpointFormat::timm_vit) {
    split_eva_rope_freqs(tensors, path_or_preset);
    fuse_split_projections(tensors, path_or_preset);
  }
  if (out.format == CheckpointFormat::timm_vit || out.format == CheckpointFormat::timm_swin ||
      out.format == CheckpointFormat::timm_swin_old) {
    merge_qv_bias(tensors, path_or_preset);
  }
  if (out.format == CheckpointFormat::torchvision_swin) zero_v2_key_bias(tensors);
  // A timm hub download keeps its config.json beside the weights: its architecture names the
  // preset when none is given (an Eva RoPE-ViT's file alone cannot tell its encoding).
  const std::string config_json =
      (std::filesystem::path(path_or_preset).parent_path() / "config.json").string();
  const bool has_config_json = opts.read_config_json && out.format != CheckpointFormat::vitpe &&
                               std::filesystem::exists(config_json);
  std::string preset_name = opts.preset;
  if (preset_name.empty() && has_config_json) {
    const std::string arch = timm_config_architecture(config_json);
    if (is_preset(arch)) preset_name = arch;
  }
  ModelConfig c;
  if (out.format == CheckpointFormat::vitpe) {
    c = ModelConfig::from_json(file.metadata().at("vitpe.config"));
    out.notes.push_back("config from the checkpoint's metadata");
    if (auto it = file.metadata().find("vitpe.version"); it != file.metadata().end()) {
      out.written_by = "vitpe " + it->second;
    }
  } else if (!preset_name.empty()) {
    c = preset(preset_name);
    if (auto it = tensors.find("head.weight"); it != tensors.end()) c.classes = it->second.size(0);
    if (auto it = tensors.find("head.fc.weight"); it != tensors.end()) {
      c.classes = it->second.size(0);
    }
    if (c.classes != 1000 && c.labels.size() != static_cast<size_t>(c.classes)) c.labels.clear();
    out.notes.push_back("config from preset '" + preset_name + "'" +
                        (opts.preset.empty() ? " (the architecture in " + config_json + ")" : ""));
  } else {
    c = infer_config(tensors, out.format, opts, out.notes, path_or_preset);
  }
  if (!opts.encoding.empty()) {
    if (out.format == CheckpointFormat::vitpe) {
      throw std::runtime_error(path_or_preset +
                               ": --encoding is for timm/torchvision files; this "
                               "checkpoint records its encoding ('" +
                               c.encoding + "')");
    }
    c.encoding = parse_encoding(opts.encoding).str();
    out.notes.push_back("encoding '" + c.encoding + "' from the command line");
  }
  if (has_config_json) {
    const std::string applied = apply_timm_config_json(c, config_json);
    out.notes.push_back("from " + config_json + " (timm's pretrained_cfg): " + applied);
  } else if (opts.read_config_json && out.format == CheckpointFormat::vitpe &&
             std::filesystem::exists(config_json)) {
    out.notes.push_back(config_json + " ignored: the checkpoint carries its own config");
  }
  if (opts.img_rows) {
    c.img_rows = opts.img_rows;
    c.img_cols = opts.img_cols ? opts.img_cols : opts.img_rows;
  }
  apply_preprocess_overrides(c, opts.preprocess, out.notes);
  if (!opts.labels_file.empty()) c.labels = read_labels(opts.labels_file);
  if (out.format != CheckpointFormat::vitpe && c.labels.empty() && c.classes == 1000) {
    c.labels = imagenet_labels();
    out.notes.push_back(
        "class names: ImageNet-1k's, in the order timm and torchvision use (--labels FILE for "
        "others)");
  }
  if (!c.labels.empty() && static_cast<int64_t>(c.labels.size()) != c.classes) {
    throw std::runtime_error("labels: the model has " + std::to_string(c.classes) +
                             " classes, the labels file names " + std::to_string(c.labels.size()));
  }
  c.validate();
  if (out.format == CheckpointFormat::vitpe || !preset_name.empty()) {
    check_config_against_tensors(c, TensorSet(tensors, path_or_preset));
  }
  out.model = make_model(c, 0);
  load_params(*out.model, tensors, path_or_preset);
  return out;
}

void save_model(Model& model, const std::string& path,
                const std::map<std::string, std::string>& extra_metadata,
                const std::vector<std::pair<std::string, Tensor>>& extra_tensors) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Param* p : model.params()) tensors.emplace_back(p->name, p->value);
  tensors.insert(tensors.end(), extra_tensors.begin(), extra_tensors.end());
  std::map<std::string, std::string> meta = extra_metadata;
  meta["vitpe.config"] = model.config().to_json();
  meta["vitpe.version"] = version();
  meta["format"] = "pt";
  save_safetensors(path, tensors, meta);
}

}  // namespace vitpe
