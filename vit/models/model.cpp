// Model helpers every family shares, and the factory (through the config's family).
#include "vit/models/model.h"

#include <algorithm>
#include <stdexcept>

#include "ops/resample.h"
#include "vit/models/family.h"
#include "vit/models/layers.h"

namespace vitpe {

std::vector<Param*> Model::params() {
  std::vector<Param*> out;
  for (const auto& [p, layer] : layered_params()) out.push_back(p);
  return out;
}

std::vector<int64_t> Model::param_layers() {
  std::vector<int64_t> out;
  for (const auto& [p, layer] : layered_params()) out.push_back(layer);
  return out;
}

void Model::set_backward_scope(BackwardScope scope) {
  if (scope.from_layer < 0 || scope.from_layer > blocks() + 1) {
    throw std::invalid_argument("backward scope: from_layer " + std::to_string(scope.from_layer) +
                                " is outside 0.." + std::to_string(blocks() + 1) +
                                " (the layers of this model of " + std::to_string(blocks()) +
                                " blocks)");
  }
  scope_ = scope;
}

std::vector<Param*> Model::trainable_params() {
  if (scope_.head_only) return head_params();
  std::vector<Param*> all = params();
  if (scope_.from_layer == 0) return all;
  const std::vector<int64_t> layers = param_layers();
  std::vector<Param*> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (layers[i] >= scope_.from_layer) out.push_back(all[i]);
  }
  return out;
}

void Model::zero_grad() {
  for (Param* p : trainable_params()) {
    if (p->grad.defined() && p->grad.shape() == p->value.shape()) {
      p->grad.zero();
    } else {
      p->grad = Tensor::zeros(p->value.shape());
    }
  }
}

void Model::ensure_grads() {
  for (Param* p : trainable_params()) {
    if (!p->grad.defined() || p->grad.shape() != p->value.shape()) {
      p->grad = Tensor::zeros(p->value.shape());
    }
  }
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32:
      return "f32";
    case Precision::bf16:
      return "bf16";
    case Precision::bf16_emulated:
      return "bf16-emulated";
    case Precision::int8:
      return "int8";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  std::string choices;
  for (Precision p : kPrecisions) {
    if (name == precision_name(p)) return p;
    choices += std::string(choices.empty() ? "" : ", ") + precision_name(p);
  }
  throw std::invalid_argument("unknown precision '" + name + "': expected one of " + choices);
}

bool bf16_supported() { return cpu_has_bf16(); }

void Model::set_precision(Precision p, bool pack) {
  if (p == Precision::bf16 && !bf16_supported()) {
    throw std::runtime_error(
        std::string("bf16 compute needs oneDNN's bf16 matmul (a CPU with avx512_bf16 or AMX), "
                    "but oneDNN reports '") +
        cpu_isa_name() +
        "' here; use f32, or bf16-emulated to measure bf16's accuracy on this CPU");
  }
  std::vector<LinearLayer*> linears;
  collect_linears(linears);
  try {
    for (LinearLayer* l : linears) l->set_precision(p, pack);
  } catch (...) {
    // A weight int8 cannot take (non-finite): the model stays in its precision, not half in each.
    for (LinearLayer* l : linears) l->set_precision(precision_, packed_);
    throw;
  }
  precision_ = p;
  packed_ = p == Precision::f32 && pack;
}

void Model::weights_changed() {
  if (precision_ != Precision::f32 || packed_) set_precision(precision_, packed_);
}

void Model::share_precision(Model& from) {
  std::vector<LinearLayer*> mine, theirs;
  collect_linears(mine);
  from.collect_linears(theirs);
  if (mine.size() != theirs.size()) {
    throw std::logic_error("share_precision: the model has " + std::to_string(mine.size()) +
                           " linear layers, the one to share " + std::to_string(theirs.size()));
  }
  for (size_t i = 0; i < mine.size(); ++i) mine[i]->share_precision(*theirs[i]);
  precision_ = from.precision_;
  packed_ = from.packed_;
}

int64_t Model::converted_weight_bytes() {
  std::vector<LinearLayer*> linears;
  collect_linears(linears);
  int64_t bytes = 0;
  for (const LinearLayer* l : linears) bytes += l->converted_bytes();
  return bytes;
}

namespace {
int64_t count(const std::vector<Param*>& params) {
  int64_t n = 0;
  for (const Param* p : params) n += p->value.numel();
  return n;
}
}  // namespace

int64_t Model::num_params() { return count(params()); }

std::vector<Param*> Model::encoding_params() {
  const EncodingParts parts = encoding_parts();
  std::vector<Param*> out;
  auto add = [&](const std::vector<Param*>& ps) { out.insert(out.end(), ps.begin(), ps.end()); };
  if (parts.token) add(parts.token->params());
  if (parts.conditional) add(parts.conditional->params());
  for (AttentionEncoding* e : parts.attention) {
    if (e) add(e->params());
  }
  return out;
}

void Model::set_extension_policy(ExtensionPolicy p) {
  const EncodingParts parts = encoding_parts();
  if (parts.token) parts.token->set_extension_policy(p);
  for (AttentionEncoding* e : parts.attention) {
    if (e) e->set_extension_policy(p);
  }
  policy_ = p;
}

std::string Model::extension_rules() {
  const EncodingParts parts = encoding_parts();
  std::vector<std::pair<std::string, ExtensionRule>> rules;
  auto note = [&](const std::string& kind, ExtensionRule e) {
    if (e == ExtensionRule::none) return;
    for (const auto& r : rules)
      if (r.first == kind) return;
    rules.emplace_back(kind, e);
  };
  if (parts.token) note(parts.token->kind(), parts.token->extension_rule());
  for (AttentionEncoding* e : parts.attention) {
    if (e) note(e->kind(), e->extension_rule());
  }
  std::string s;
  for (const auto& r : rules) s += (s.empty() ? "" : ", ") + r.first + " " + rule_name(r.second);
  return s.empty() ? "none" : s;
}
int64_t Model::num_encoding_params() { return count(encoding_params()); }

std::unique_ptr<Model> make_model(const ModelConfig& config, uint64_t seed) {
  config.validate();
  return family_of(config).build(config, seed);
}

std::unique_ptr<Model> with_patch_size(Model& model, int64_t patch, int64_t rows, int64_t cols) {
  const ModelConfig& from = model.config();
  if (from.is_swin()) {
    throw std::invalid_argument("patch resize: a ViT-family model only (Swin's patch merging and "
                                "windows are built for its patch size), found " + from.family);
  }
  if (patch < 1 || rows % patch != 0 || cols % patch != 0) {
    throw std::invalid_argument("patch resize: " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " is not whole patches of " +
                                std::to_string(patch) + " pixels");
  }
  ModelConfig c = from;
  c.patch = patch;
  c.img_rows = rows;
  c.img_cols = cols;
  std::unique_ptr<Model> out = make_model(c, 0);
  std::vector<Param*> src = model.params();
  const std::string kernel = "patch_embed.proj.weight";
  for (Param* p : out->params()) {
    auto it = std::find_if(src.begin(), src.end(), [&](Param* q) { return q->name == p->name; });
    if (it == src.end()) throw std::logic_error("patch resize: no tensor " + p->name + " to copy");
    const Tensor& v = (*it)->value;
    if (p->name == kernel) {
      p->value.copy_from(pi_resize_kernel(v, patch, patch));
    } else if (v.shape() == p->value.shape()) {
      p->value.copy_from(v);
    } else {
      throw std::logic_error("patch resize: " + p->name + " is " + v.shape().str() +
                             " in the model and " + p->value.shape().str() + " at patch " +
                             std::to_string(patch));
    }
  }
  out->set_extension_policy(model.extension_policy());
  return out;
}

}  // namespace vitpe
