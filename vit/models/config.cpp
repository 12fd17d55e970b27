// ModelConfig: the common part's validation and JSON, the architecture through the config's
// family (vit/models/family.h), and the preset registry over every family.
#include "vit/models/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ops/json_limits.h"
#include "ops/util.h"
#include "vit/models/family.h"

namespace vitpe {

namespace {

// A number as a user reads it (1e+300, 1e-10, 0.875), not std::to_string's 300 digits.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

// ---- preprocessing
// --------------------------------------------------------------------------------

Interpolation parse_interpolation(const std::string& name, const std::string& what) {
  if (name == "bicubic") return Interpolation::bicubic;
  if (name == "bilinear") return Interpolation::bilinear;
  throw std::invalid_argument(what + ": expected interpolation 'bicubic' or 'bilinear', found '" +
                              name + "'");
}

const char* interpolation_name(Interpolation i) {
  return i == Interpolation::bicubic ? "bicubic" : "bilinear";
}

CropMode parse_crop_mode(const std::string& name, const std::string& what) {
  if (name == "center") return CropMode::center;
  if (name == "squash") return CropMode::squash;
  throw std::invalid_argument(what + ": expected crop mode 'center' or 'squash' (timm's " +
                              "'border' is not supported), found '" + name + "'");
}

const char* crop_mode_name(CropMode m) { return m == CropMode::center ? "center" : "squash"; }

void PreprocessConfig::validate(int64_t channels, const std::string& where) const {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(where + ": " + what); };
  if (!(crop_pct >= kMinCropPct && crop_pct <= kMaxCropPct)) {
    fail("crop_pct must be in [" + num(kMinCropPct) + ", " + num(kMaxCropPct) + "], found " +
         num(crop_pct));
  }
  if (static_cast<int64_t>(mean.size()) != channels ||
      static_cast<int64_t>(std_dev.size()) != channels) {
    fail("mean/std need " + std::to_string(channels) + " values (one per channel), found " +
         std::to_string(mean.size()) + "/" + std::to_string(std_dev.size()));
  }
  for (size_t i = 0; i < mean.size(); ++i) {
    if (!(std::fabs(mean[i]) <= kMaxMean) || !(std_dev[i] >= kMinStd && std_dev[i] <= kMaxStd)) {
      fail("channel " + std::to_string(i) + ": mean must be in [-" + num(kMaxMean) + ", " +
           num(kMaxMean) + "] and std in [" + num(kMinStd) + ", " + num(kMaxStd) + "], found " +
           num(mean[i]) + " and " + num(std_dev[i]));
    }
  }
}

// ---- the config
// -----------------------------------------------------------------------------------

namespace {

template <typename Arch>
Arch& arch_of(std::variant<VitArch, SwinArch>& arch, const std::string& family, const char* want) {
  if (auto* a = std::get_if<Arch>(&arch)) return *a;
  throw std::logic_error(std::string("model config: the ") + want +
                         " architecture asked of a config of family '" + family + "'");
}

}  // namespace

VitArch& ModelConfig::vit() { return arch_of<VitArch>(arch, family, "ViT"); }
const VitArch& ModelConfig::vit() const {
  return arch_of<VitArch>(const_cast<std::variant<VitArch, SwinArch>&>(arch), family, "ViT");
}
SwinArch& ModelConfig::swin() { return arch_of<SwinArch>(arch, family, "Swin"); }
const SwinArch& ModelConfig::swin() const {
  return arch_of<SwinArch>(const_cast<std::variant<VitArch, SwinArch>&>(arch), family, "Swin");
}

int64_t ModelConfig::embed_dim() const {
  return std::visit([](const auto& a) { return a.dim; }, arch);
}

int64_t ModelConfig::prefix_tokens() const { return is_vit() ? vit().prefix_tokens() : 0; }

std::string ModelConfig::family_label() const {
  return label.empty() ? family_of(*this).describe(*this) : label;
}

void ModelConfig::validate() const {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("model config" + (name.empty() ? "" : " '" + name + "'") + ": " +
                                what);
  };
  const FamilyDef& f = family_of(*this);
  if (f.blank().arch.index() != arch.index()) {
    fail("family '" + family + "' has another architecture than the one given");
  }
  // Sizes are bounded so that a config (from a file's metadata or --set) cannot make the model
  // allocate without limit before any tensor is checked; the bounds are far past any real model.
  check_range(fail, "img_rows", img_rows, 1, 16384);
  check_range(fail, "img_cols", img_cols, 1, 16384);
  check_range(fail, "channels", channels, 1, 64);
  check_range(fail, "patch", patch, 1, 1024);
  check_range(fail, "classes", classes, 0, 1 << 24);  // 0: no head (an image encoder)
  if (img_rows % patch || img_cols % patch) {
    fail("image size " + std::to_string(img_rows) + "x" + std::to_string(img_cols) +
         " is not a multiple of the patch size " + std::to_string(patch));
  }
  try {
    preprocess.validate(channels, "preprocessing");
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  if (!labels.empty() && static_cast<int64_t>(labels.size()) != classes) {
    fail("labels: expected " + std::to_string(classes) + " names, found " +
         std::to_string(labels.size()));
  }
  if (encoding.parts.empty()) fail("no position encoding given (e.g. 'none', 'learned1d')");
  f.validate(*this, fail);
}

std::string ModelConfig::to_json() const {
  nlohmann::json j;
  j["kind"] = family;
  j["name"] = name;
  j["label"] = family_label();
  j["img_size"] = {img_rows, img_cols};
  j["channels"] = channels;
  j["patch"] = patch;
  j["classes"] = classes;
  j["encoding"] = encoding.str();
  family_of(*this).arch_to_json(*this, j);
  j["crop_pct"] = preprocess.crop_pct;
  j["crop_mode"] = crop_mode_name(preprocess.crop_mode);
  j["interpolation"] = interpolation_name(preprocess.interpolation);
  j["mean"] = preprocess.mean;
  j["std"] = preprocess.std_dev;
  j["labels"] = labels;
  return j.dump();
}

ModelConfig ModelConfig::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_json_limited(text, JsonLimits{.max_depth = 8});  // a checkpoint's: from outside
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("model config: invalid JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("model config: expected a JSON object");
  ModelConfig c;
  try {
    c = vitpe::family(json_string(j, "kind")).blank();
    c.name = json_string(j, "name", "custom");
    c.label = json_string(j, "label", "");
    const nlohmann::json& size = j.at("img_size");
    if (!size.is_array() || size.size() != 2) {
      throw std::invalid_argument("model config: img_size must be [rows, cols], found " +
                                  size.dump().substr(0, 40));
    }
    c.img_rows = json_integer_value(size[0], "img_size");
    c.img_cols = json_integer_value(size[1], "img_size");
    c.channels = json_integer(j, "channels");
    c.patch = json_integer(j, "patch");
    c.classes = json_integer(j, "classes");
    c.encoding = parse_encoding(json_string(j, "encoding"));
    family_of(c).arch_from_json(j, c);
    // Older files have no crop_mode or interpolation: timm's defaults.
    c.preprocess.crop_pct = json_number(j, "crop_pct", 0.875);
    c.preprocess.crop_mode =
        parse_crop_mode(json_string(j, "crop_mode", "center"), "model config: crop_mode");
    c.preprocess.interpolation = parse_interpolation(json_string(j, "interpolation", "bicubic"),
                                                     "model config: interpolation");
    c.preprocess.mean = j.at("mean").get<std::vector<float>>();
    c.preprocess.std_dev = j.at("std").get<std::vector<float>>();
    c.labels = j.value("labels", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("model config: missing or mistyped field: ") +
                                e.what());
  }
  c.validate();
  return c;
}

// ---- presets
// --------------------------------------------------------------------------------------

namespace {

struct FoundPreset {
  const FamilyDef* family = nullptr;
  const PresetDef* preset = nullptr;
};

FoundPreset find_preset(const std::string& name) {
  for (const FamilyDef* f : families()) {
    for (const PresetDef& p : f->presets) {
      if (name == p.name || (p.alias[0] != '\0' && name == p.alias)) return {f, &p};
    }
  }
  return {};
}

// Levenshtein distance, for suggesting the closest preset names.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const FamilyDef* f : families()) {
    for (const PresetDef& p : f->presets) names.emplace_back(p.name);
  }
  return names;
}

bool is_preset(const std::string& name) { return find_preset(name).preset != nullptr; }

std::vector<std::string> closest_presets(const std::string& name, size_t most) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const FamilyDef* f : families()) {
    for (const PresetDef& p : f->presets) {
      size_t d = edit_distance(name, p.name);
      if (p.alias[0] != '\0') d = std::min(d, edit_distance(name, p.alias));
      // A shortened name ("swin_tiny") is as good as a near miss.
      if (name.size() >= 3 && starts_with(p.name, name)) d = 0;
      scored.emplace_back(d, p.name);
    }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, n] : scored) {
    // Close enough to be a misspelling (at most a third of the letters differ), and about as
    // close as the closest.
    if (out.size() < most && d <= std::max<size_t>(2, name.size() / 3) &&
        d <= scored.front().first + 1) {
      out.push_back(n);
    }
  }
  return out;
}

ModelConfig preset(const std::string& name) {
  if (const FoundPreset p = find_preset(name); p.preset) {
    ModelConfig c = p.preset->make();
    c.family = p.family->name;
    c.name = p.preset->name;
    c.label = p.preset->label;
    return c;
  }
  const std::vector<std::string> close = closest_presets(name, 3);
  throw std::invalid_argument("unknown model preset '" + name + "'" +
                              (close.empty() ? "" : "; did you mean " + join(close, " or ") + "?") +
                              " (known: " + join(preset_names(), ", ") + ")");
}

}  // namespace vitpe
