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
#include "vit/models/family.h"
#include "vitpe/vitpe_version.h"

namespace vitpe {

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
  model.weights_changed();  // bf16, int8 or packed copies of the old weights go
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : tensors) {
    if (!used.count(name)) unexpected.push_back(name + " " + t.shape().str());
  }
  if (missing.empty() && misshaped.empty() && unexpected.empty()) return;
  std::ostringstream msg;
  msg << source << ": the checkpoint does not match the model (encoding '"
      << model.config().encoding.str() << "')";
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
    c.preprocess.mean = per_channel(cfg["mean"], "pretrained_cfg.mean");
    set.push_back("mean");
  }
  if (cfg.contains("std")) {
    c.preprocess.std_dev = per_channel(cfg["std"], "pretrained_cfg.std");
    set.push_back("std");
  }
  if (cfg.contains("crop_pct")) {
    c.preprocess.crop_pct = number(cfg["crop_pct"], "pretrained_cfg.crop_pct");
    std::ostringstream crop;
    crop << c.preprocess.crop_pct;
    set.push_back("crop_pct " + crop.str());
  }
  if (cfg.contains("crop_mode")) {
    const std::string mode = text_of(cfg["crop_mode"], "pretrained_cfg.crop_mode");
    try {
      c.preprocess.crop_mode = parse_crop_mode(mode, "pretrained_cfg.crop_mode");
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    set.push_back("crop_mode " + mode);
  }
  if (cfg.contains("interpolation")) {
    const std::string interp = text_of(cfg["interpolation"], "pretrained_cfg.interpolation");
    try {
      c.preprocess.interpolation = parse_interpolation(interp, "pretrained_cfg.interpolation");
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    set.push_back(interp);
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

// The caller's --mean/--std/--crop-pct/--crop-mode/--interpolation, last (validated with the
// rest of the config).
void apply_preprocess_overrides(ModelConfig& c, const PreprocessOverrides& p,
                                std::vector<std::string>& notes) {
  if (!p.any()) return;
  if (!p.mean.empty()) c.preprocess.mean = p.mean;
  if (!p.std_dev.empty()) c.preprocess.std_dev = p.std_dev;
  if (p.crop_pct) c.preprocess.crop_pct = *p.crop_pct;
  if (p.crop_mode) c.preprocess.crop_mode = *p.crop_mode;
  if (p.interpolation) c.preprocess.interpolation = *p.interpolation;
  notes.push_back("preprocessing overridden by the command line");
}

// A preset name: a freshly initialised model (seed 0).
LoadedModel load_preset(const std::string& name, const LoadOptions& opts) {
  LoadedModel out;
  out.format = "preset";
  ModelConfig c = preset(name);
  apply_preprocess_overrides(c, opts.preprocess, out.notes);
  if (!opts.labels_file.empty()) c.labels = read_labels(opts.labels_file);
  out.model = make_model(c, 0);
  out.notes.push_back("preset '" + name + "' with random weights (seed 0)");
  return out;
}

// A foreign file's tensors under our names: its dialect's renaming (derived buffers dropped),
// then its fusions and splits.
TensorMap foreign_tensors(SafeTensorsFile& file, const DialectMatch& match,
                          const std::string& path) {
  TensorMap tensors;
  for (const auto& n : file.names()) {
    const std::string mapped = map_checkpoint_name(n, *match.dialect);
    if (mapped.empty()) continue;
    if (tensors.count(mapped)) {
      throw std::runtime_error(path + ": tensors map to the same name '" + mapped + "'");
    }
    tensors.emplace(mapped, file.get(n));
  }
  if (match.dialect->prepare) match.dialect->prepare(tensors, path);
  return tensors;
}

// A guessed part is never run silently: what the tensors left open, and the flags that settle
// each, unless the caller asked for the assumptions (then each is a note).
void refuse_unsettled(const std::vector<Unsettled>& unsettled, const CheckpointDialect& dialect,
                      const LoadOptions& opts, const std::string& path,
                      std::vector<std::string>& notes) {
  if (unsettled.empty()) return;
  if (opts.assume_defaults) {
    for (const Unsettled& u : unsettled) notes.push_back("assumed: " + u.what);
    return;
  }
  std::string msg = path + ": this " + dialect.name + " file does not tell " +
                    (unsettled.size() == 1 ? "one part" : "some parts") +
                    " of the model, and nothing given settles " +
                    (unsettled.size() == 1 ? "it" : "them") + ":";
  for (const Unsettled& u : unsettled) msg += "\n  - " + u.what + "; give " + u.flags;
  msg +=
      "\n  (timm's config.json beside the file, naming its architecture, settles them too; "
      "--assume-defaults loads the file with the assumptions above)";
  throw std::runtime_error(msg);
}

// The classes of a foreign file's weights (its family's head), for a preset's config.
int64_t head_classes(const FamilyDef& f, const TensorMap& tensors, const std::string& path) {
  auto it = tensors.find(f.head_weight);
  if (it == tensors.end()) return 0;  // an image encoder's file (timm's num_classes=0)
  if (it->second.ndim() != 2) {
    throw std::runtime_error(path + ": expected the classifier " + f.head_weight +
                             " [classes, width], found " + it->second.shape().str());
  }
  return it->second.size(0);
}

}  // namespace

LoadedModel load_model(const std::string& path_or_preset, const LoadOptions& opts) {
  if (is_preset(path_or_preset)) return load_preset(path_or_preset, opts);
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
  const std::string& path = path_or_preset;
  LoadedModel out;
  SafeTensorsFile file = SafeTensorsFile::open(path);
  const bool ours = file.metadata().count("vitpe.config") > 0;
  DialectMatch match;
  TensorMap tensors;
  if (ours) {
    // A training run's last.safetensors also holds the optimizer's state ("optim.*", with the
    // "vitpe.train" metadata): not the model's, and not read here.
    const bool trainer_state = file.metadata().count("vitpe.train") > 0;
    for (const auto& n : file.names()) {
      if (trainer_state && starts_with(n, "optim.")) continue;
      tensors.emplace(n, file.get(n));
    }
  } else {
    match = recognise_checkpoint(file.names());
    out.format = match.dialect->name;
    tensors = foreign_tensors(file, match, path);
  }
  // A timm hub download keeps its config.json beside the weights: its architecture names the
  // preset when none is given (an Eva RoPE-ViT's file alone cannot tell its encoding).
  const std::string config_json =
      (std::filesystem::path(path).parent_path() / "config.json").string();
  const bool has_config_json =
      opts.read_config_json && !ours && std::filesystem::exists(config_json);
  std::string preset_name = opts.preset;
  if (preset_name.empty() && has_config_json) {
    const std::string arch = timm_config_architecture(config_json);
    if (is_preset(arch)) {
      preset_name = arch;
    } else if (arch.find("dinov3") != std::string::npos) {
      // timm's other DINOv3 sizes (small_plus, huge_plus: SwiGLU aligned to 8; 7b) are not
      // presets: refused rather than read off the tensors with parts vitpe has not checked.
      throw std::runtime_error(config_json + " names '" + arch +
                               "': a DINOv3 model vitpe has no preset for (it runs " +
                               "vit_{small,base,large}_patch16_dinov3 and their _qkvb variants)");
    } else if (!arch.empty()) {
      const std::vector<std::string>& prefixes = match.family->timm_prefixes;
      if (std::none_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& p) { return starts_with(arch, p); })) {
        throw std::runtime_error(config_json + " names the architecture '" + arch + "', but " +
                                 path + " is a " + match.dialect->name + " checkpoint (timm's " +
                                 join(prefixes, "*, ") +
                                 "* models): the config.json is another model's; move it away, "
                                 "or give --preset with the weights' model");
      }
      out.notes.push_back(config_json + " names '" + arch +
                          "', which is not a vitpe preset: the architecture is read off the "
                          "tensors");
    }
  }
  ModelConfig c;
  if (ours) {
    c = ModelConfig::from_json(file.metadata().at("vitpe.config"));
    out.notes.push_back("config from the checkpoint's metadata");
    if (auto it = file.metadata().find("vitpe.version"); it != file.metadata().end()) {
      out.written_by = "vitpe " + it->second;
    }
  } else if (!preset_name.empty()) {
    c = preset(preset_name);
    const FamilyDef& pf = family_of(c);
    if ((pf.files_family.empty() ? pf.name : pf.files_family) != match.family->name) {
      throw std::runtime_error(path + ": the file is a " + match.dialect->name +
                               " checkpoint, but preset '" + preset_name + "' is of family '" +
                               c.family + "'");
    }
    c.classes = head_classes(*match.family, tensors, path);
    if (c.classes != 1000 && c.labels.size() != static_cast<size_t>(c.classes)) c.labels.clear();
    out.notes.push_back("config from preset '" + preset_name + "'" +
                        (opts.preset.empty() ? " (the architecture in " + config_json + ")" : ""));
  } else {
    InferHints hints;
    hints.heads = opts.heads;
    hints.window = opts.window;
    hints.img_rows = opts.img_rows;
    hints.img_cols = opts.img_cols;
    hints.encoding_given = !opts.encoding.empty();
    hints.mlp = opts.mlp;
    InferredConfig inferred = match.dialect->infer(tensors, hints, path);
    c = std::move(inferred.config);  // no label: the family describes the final config
    out.notes.insert(out.notes.end(), inferred.notes.begin(), inferred.notes.end());
    refuse_unsettled(inferred.unsettled, *match.dialect, opts, path, out.notes);
  }
  if (!opts.encoding.empty()) {
    if (ours) {
      throw std::runtime_error(path +
                               ": --encoding is for timm/torchvision files; this "
                               "checkpoint records its encoding ('" +
                               c.encoding.str() + "')");
    }
    const EncodingSpec given = parse_encoding(opts.encoding);
    if (given != c.encoding) c.label.clear();  // a preset's label names its own encoding
    c.encoding = given;
    out.notes.push_back("encoding '" + c.encoding.str() + "' from the command line");
  }
  if (!opts.mlp.empty() && (ours || !preset_name.empty())) {
    throw std::runtime_error(path + ": --mlp is for timm files read without a config; " +
                             (ours ? std::string("this checkpoint records its model")
                                   : "preset '" + preset_name + "' names the model's MLP"));
  }
  if (has_config_json) {
    const std::string applied = apply_timm_config_json(c, config_json);
    out.notes.push_back("from " + config_json + " (timm's pretrained_cfg): " + applied);
  } else if (opts.read_config_json && ours && std::filesystem::exists(config_json)) {
    out.notes.push_back(config_json + " ignored: the checkpoint carries its own config");
  }
  if (opts.img_rows) {
    c.img_rows = opts.img_rows;
    c.img_cols = opts.img_cols ? opts.img_cols : opts.img_rows;
  }
  apply_preprocess_overrides(c, opts.preprocess, out.notes);
  if (!opts.labels_file.empty()) c.labels = read_labels(opts.labels_file);
  if (!ours && c.labels.empty() && c.classes == 1000) {
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
  if (ours || !preset_name.empty()) family_of(c).check_tensors(c, tensors, path);
  out.model = make_model(c, 0);
  load_params(*out.model, tensors, path);
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
