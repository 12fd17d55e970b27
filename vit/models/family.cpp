// What the families share (vit/models/family.h): checkpoint helpers, JSON readers, checks.
#include "vit/models/family.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ops/util.h"

namespace vitpe {

std::string map_checkpoint_name(const std::string& name, const CheckpointDialect& dialect) {
  if (ends_with(name, "relative_position_index") || ends_with(name, "attn_mask") ||
      ends_with(name, "relative_coords_table")) {
    return "";
  }
  return dialect.map_name(name);
}

ModelConfig fashion_mnist_input(ModelConfig c) {
  c.img_rows = c.img_cols = 28;
  c.channels = 1;
  c.classes = 10;
  c.preprocess.crop_pct = 1.0;
  c.preprocess.mean = {kFashionMnistMean};
  c.preprocess.std_dev = {kFashionMnistStd};
  c.labels = kFashionMnistLabels;
  return c;
}

bool any_starts_with(const std::vector<std::string>& names, const std::string& prefix) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return starts_with(n, prefix); });
}

int64_t count_blocks(const std::vector<std::string>& names, const std::string& prefix) {
  int64_t n = 0;
  while (std::find(names.begin(), names.end(), prefix + std::to_string(n) + ".norm1.weight") !=
         names.end()) {
    ++n;
  }
  return n;
}

Shape squeeze_leading(const Shape& s) {
  std::vector<int64_t> v = s.vec();
  while (v.size() > 1 && v.front() == 1) v.erase(v.begin());
  return Shape(v);
}

TensorSet::TensorSet(const TensorMap& tensors, const std::string& p) : t(tensors), path(p) {
  for (const auto& [n, v] : t) names.push_back(n);
}

const Tensor& TensorSet::need(const std::string& name) const {
  auto it = t.find(name);
  if (it == t.end()) {
    throw std::runtime_error(path + ": cannot infer the model: tensor '" + name + "' is missing");
  }
  return it->second;
}

int64_t infer_common(ModelConfig& c, const TensorSet& ts, const std::string& head,
                     const InferHints& hints) {
  c.name = "custom";
  const Tensor& pw = ts.need("patch_embed.proj.weight");  // [D, C, p, p]
  if (pw.ndim() != 4 || pw.size(2) != pw.size(3)) {
    throw std::runtime_error(ts.path + ": patch_embed.proj.weight: expected [D, C, p, p], found " +
                             pw.shape().str());
  }
  c.channels = pw.size(1);
  c.patch = pw.size(2);
  // ImageNet's statistics for RGB (timm's and torchvision's default), 0.5 otherwise.
  c.preprocess.mean = c.channels == 3 ? kImageNetMean : std::vector<float>(c.channels, 0.5f);
  c.preprocess.std_dev = c.channels == 3 ? kImageNetStd : std::vector<float>(c.channels, 0.5f);
  // No head: an image encoder (timm's num_classes=0: DINOv2, SigLIP), its output the pooled
  // features.
  c.classes = ts.has(head) ? ts.need(head).size(0) : 0;
  c.img_rows = hints.img_rows ? hints.img_rows : 224;
  c.img_cols = hints.img_cols ? hints.img_cols : c.img_rows;
  return pw.size(0);
}

void check_matches(const std::string& path, const std::string& what, int64_t config, int64_t file) {
  if (config != file) {
    throw std::runtime_error(path + ": the model config says " + what + " " +
                             std::to_string(config) + ", the tensors say " + std::to_string(file));
  }
}

void check_common_tensors(const ModelConfig& c, int64_t dim, const TensorSet& ts,
                          const std::string& head) {
  const Tensor& pw = ts.need("patch_embed.proj.weight");
  if (pw.ndim() != 4) {
    throw std::runtime_error(ts.path + ": patch_embed.proj.weight: expected [D, C, p, p], found " +
                             pw.shape().str());
  }
  check_matches(ts.path, "dim", dim, pw.size(0));
  check_matches(ts.path, "channels", c.channels, pw.size(1));
  check_matches(ts.path, "patch", c.patch, pw.size(2));
  check_matches(ts.path, "classes", c.classes, ts.has(head) ? ts.need(head).size(0) : 0);
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::f32 ? t : t.to(DType::f32); }

void merge_qv_bias(TensorMap& tensors, const std::string& path) {
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
    const Tensor qf = as_f32(q), vf = as_f32(v->second);
    std::memcpy(qkv.f32(), qf.f32(), D * sizeof(float));
    std::memcpy(qkv.f32() + 2 * D, vf.f32(), D * sizeof(float));
    tensors.erase(attn + "q_bias");
    tensors.erase(attn + "v_bias");
    tensors.emplace(attn + "qkv.bias", qkv);
  }
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& t : parts) rows += t.size(0);
  std::vector<int64_t> dims = parts[0].shape().vec();
  dims[0] = rows;
  Tensor out = Tensor::empty(Shape(dims));
  int64_t at = 0;
  for (const Tensor& t : parts) {
    const Tensor f = as_f32(t);
    std::memcpy(out.f32() + at, f.f32(), f.numel() * sizeof(float));
    at += f.numel();
  }
  return out;
}

// ---- JSON
// ----------------------------------------------------------------------------------------

namespace {

[[noreturn]] void mistyped(const std::string& key, const char* expected, const nlohmann::json& v) {
  throw std::invalid_argument("model config: " + key + " must be " + expected + ", found " +
                              v.dump().substr(0, 40));
}

const nlohmann::json* field(const nlohmann::json& j, const std::string& key, bool optional) {
  auto it = j.find(key);
  if (it != j.end()) return &*it;
  if (optional) return nullptr;
  throw std::invalid_argument("model config: missing field '" + key + "'");
}

// A JSON integer that fits int64 (a float such as 1e300 was once cast with undefined behaviour).
int64_t integer_of(const nlohmann::json& v, const std::string& key) {
  if (v.is_number_integer() &&
      !(v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return v.get<int64_t>();
  }
  mistyped(key, "an integer", v);
}

}  // namespace

int64_t json_integer(const nlohmann::json& j, const std::string& key,
                     std::optional<int64_t> fallback) {
  const nlohmann::json* v = field(j, key, fallback.has_value());
  return v ? integer_of(*v, key) : *fallback;
}

int64_t json_integer_value(const nlohmann::json& v, const std::string& what) {
  return integer_of(v, what);
}

std::vector<int64_t> json_integers(const nlohmann::json& j, const std::string& key) {
  const nlohmann::json& v = *field(j, key, false);
  if (!v.is_array()) mistyped(key, "a list of integers", v);
  std::vector<int64_t> out;
  for (const auto& x : v) out.push_back(integer_of(x, key));
  return out;
}

double json_number(const nlohmann::json& j, const std::string& key,
                   std::optional<double> fallback) {
  const nlohmann::json* v = field(j, key, fallback.has_value());
  if (!v) return *fallback;
  if (!v->is_number()) mistyped(key, "a number", *v);
  return v->get<double>();
}

bool json_bool(const nlohmann::json& j, const std::string& key, std::optional<bool> fallback) {
  const nlohmann::json* v = field(j, key, fallback.has_value());
  if (!v) return *fallback;
  if (!v->is_boolean()) mistyped(key, "true or false", *v);
  return v->get<bool>();
}

std::string json_string(const nlohmann::json& j, const std::string& key,
                        std::optional<std::string> fallback) {
  const nlohmann::json* v = field(j, key, fallback.has_value());
  if (!v) return *fallback;
  if (!v->is_string()) mistyped(key, "a string", *v);
  return v->get<std::string>();
}

void check_range(const std::function<void(const std::string&)>& fail, const std::string& field,
                 int64_t v, int64_t least, int64_t most) {
  if (v < least || v > most) {
    fail(field + " must be in " + std::to_string(least) + ".." + std::to_string(most) + ", found " +
         std::to_string(v));
  }
}

}  // namespace vitpe
