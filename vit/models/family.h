// Model families as modules. A family (timm's VisionTransformer zoo, Swin, ...) is one folder
// under vit/models/ that defines one FamilyDef, and one line in families.cpp: its presets, how to
// build its model, its architecture struct's JSON and validation, how to recognise its
// checkpoints and map their tensor names, how to infer a config from the tensors, and what the
// GPU path cannot run. Nothing outside a family's folder branches on the family: callers ask the
// registry (family_of(config)) for what differs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vit/models/config.h"
#include "vit/models/model.h"

namespace vitpe {

// A checkpoint's tensors by name, as a reader hands them to a family.
using TensorMap = std::map<std::string, Tensor>;

// One preset: timm's name (or ours), an alias in vitpe's earlier spelling ("" for none), the
// family label of what it builds, and the config with the preprocessing of timm's default
// weights for that name.
struct PresetDef {
  const char* name;
  const char* alias;
  const char* label;
  ModelConfig (*make)();
};

// What the user said about a foreign file that the tensors may not tell (flags; 0: not given).
struct InferHints {
  int64_t heads = 0;   // ViT attention heads
  int64_t window = 0;  // Swin window
  int64_t img_rows = 0, img_cols = 0;
  bool encoding_given = false;  // --encoding will replace what the tensors suggest
  std::string mlp;              // ViT: the MLP's activation as given ("": not given)
};

// Something a foreign file does not tell and nothing the user gave settled: what was assumed,
// and the flags (or files) that settle it. A loader refuses the file while any is left, unless
// told to assume the defaults.
struct Unsettled {
  std::string what;   // "the attention heads (not stored in timm's ViT files): 6 assumed"
  std::string flags;  // "--heads N, or --preset NAME, or timm's config.json beside the file"
};

// A config read off a foreign file's tensors.
struct InferredConfig {
  ModelConfig config;
  std::vector<std::string> notes;    // how each part was obtained (for `vitpe info`)
  std::vector<Unsettled> unsettled;  // what was assumed
};

// One layout of foreign checkpoints a family reads (timm's names, torchvision's, older timm's).
struct CheckpointDialect {
  std::string name;  // "timm ViT": what `vitpe info` calls the file's format
  // How surely the tensor names are this dialect's: 0 not at all, 1 its generic marks, more for
  // marks only it has (a family built on another's layout outbids it). The highest wins; a tie
  // goes to the first family in families.cpp.
  std::function<int(const std::vector<std::string>& names)> recognise;
  // A tensor's name in our layout (timm >= 0.9 names); "" for a derived buffer that is dropped.
  std::function<std::string(const std::string& name)> map_name;
  // After renaming: tensors fused or split into ours (q/k/v projections into qkv, ...). Throws
  // naming `path` and the tensors. May be empty.
  std::function<void(TensorMap& tensors, const std::string& path)> prepare;
  // The config read off the (renamed, prepared) tensors, with this dialect's default
  // preprocessing. Throws naming `path` and the tensor that does not fit.
  std::function<InferredConfig(const TensorMap& tensors, const InferHints& hints,
                               const std::string& path)>
      infer;
};

// Where one block's attention encoding works: its heads and head width, the window it sees at the
// configured input size (the whole grid for global attention), the prefix tokens before it, and
// the name prefix of its parameters ("blocks.3.", "layers.1.blocks.0.").
struct AttentionSite {
  int64_t heads = 0, head_dim = 0;
  AttnGeometry geom;
  std::string params_prefix;
};

struct FamilyDef {
  std::string name;     // "vit": ModelConfig::family and the JSON "kind"
  std::string summary;  // one line for help texts
  AttentionLayout layout = AttentionLayout::global;
  std::vector<PresetDef> presets;  // in the order help texts list them

  // A config of this family with its default architecture (from_json starts from it).
  std::function<ModelConfig()> blank;
  // The architecture's fields into / out of the flat JSON object (every field written; fields
  // missing from a file take their defaults, as files written before they existed).
  std::function<void(const ModelConfig&, nlohmann::json&)> arch_to_json;
  std::function<void(const nlohmann::json&, ModelConfig&)> arch_from_json;
  // Throws std::invalid_argument through `fail` naming the first inconsistent field.
  std::function<void(const ModelConfig&, const std::function<void(const std::string&)>& fail)>
      validate;
  // The label of a config that has none (built by hand, files from before labels).
  std::function<std::string(const ModelConfig&)> describe;
  // `vitpe info`'s architecture lines: (field, text), e.g. ("width", "384, depth 12, ...").
  std::function<std::vector<std::pair<std::string, std::string>>(const ModelConfig&)> info;
  // The token site's prefix rows: tokens before the patches that the token encoding covers.
  std::function<int64_t(const ModelConfig&)> token_prefix;
  // Every block's attention site, in block order.
  std::function<std::vector<AttentionSite>(const ModelConfig&)> attention_sites;

  std::function<std::unique_ptr<Model>(const ModelConfig&, uint64_t seed)> build;

  std::vector<CheckpointDialect> dialects;
  // The family whose dialects read this family's files, when it has none of its own: the image
  // encoders built on timm's VisionTransformer (DINOv2, CLIP, SigLIP) are saved as its state
  // dicts, so a preset of theirs loads a "timm ViT" file. Empty: this family's own.
  std::string files_family;
  // How timm's model names of this family begin ("vit_", "deit"): a config.json beside a file
  // of this family naming another architecture ("resnet50") is a mistake, not a variant.
  std::vector<std::string> timm_prefixes;
  std::string head_weight;  // the classifier's weight in our names ("head.weight")
  // Before a model is built from a config that came with a file (our metadata, a preset), the
  // config's sizes must be the tensors' (patch embedding, classes, blocks): throws naming `path`,
  // the field, the config's value and the file's.
  std::function<void(const ModelConfig&, const TensorMap&, const std::string& path)> check_tensors;

  // What the whole-model GPU path (vit/models/cuda_model.h) does not run of this config, e.g.
  // "Swin V2's cosine attention"; "" when it runs all of it.
  std::function<std::string(const ModelConfig&)> gpu_unsupported;
};

// The families, in the order their presets are listed and their dialects are tried.
const std::vector<const FamilyDef*>& families();
// The family of that name; throws std::invalid_argument listing the known ones.
const FamilyDef& family(const std::string& name);
const FamilyDef& family_of(const ModelConfig& config);

// A recognised foreign checkpoint: its family and dialect.
struct DialectMatch {
  const FamilyDef* family = nullptr;
  const CheckpointDialect* dialect = nullptr;
};
// The dialect the names are written in; throws std::runtime_error naming the marks looked for
// when no family recognises them.
DialectMatch recognise_checkpoint(const std::vector<std::string>& names);
// The dialect of that name ("timm ViT"); throws std::invalid_argument listing the known ones.
DialectMatch dialect(const std::string& name);

// A foreign tensor's name in our layout under `dialect`: "" for the derived buffers every
// layout may save and the model computes itself (relative_position_index, attn_mask,
// relative_coords_table).
std::string map_checkpoint_name(const std::string& name, const CheckpointDialect& dialect);

// Shared by the families ----------------------------------------------------------------------

// Fashion-MNIST's input (28 x 28 gray, 10 classes, its statistics and names) on a config.
ModelConfig fashion_mnist_input(ModelConfig c);
// Whether `names` has a name starting with `prefix`.
bool any_starts_with(const std::vector<std::string>& names, const std::string& prefix);

// The number of blocks "<prefix>N.norm1.weight" for N = 0, 1, ... present.
int64_t count_blocks(const std::vector<std::string>& names, const std::string& prefix);
// Drops leading size-1 dimensions ([1, 197, 384] -> [197, 384]).
Shape squeeze_leading(const Shape& s);
// A foreign checkpoint's tensors, with errors that name the file.
struct TensorSet {
  const TensorMap& t;
  const std::string& path;
  std::vector<std::string> names;

  TensorSet(const TensorMap& tensors, const std::string& p);
  bool has(const std::string& name) const { return t.count(name) > 0; }
  // Throws "PATH: cannot infer the model: tensor 'NAME' is missing".
  const Tensor& need(const std::string& name) const;
};
// What every family shares: channels and patch from "patch_embed.proj.weight" [D, C, p, p], the
// classes from `head`, the statistics (ImageNet's for RGB, 0.5 otherwise) and the size from the
// hints (else 224). Returns the embedding width D.
int64_t infer_common(ModelConfig& c, const TensorSet& ts, const std::string& head,
                     const InferHints& hints);
// Throws "PATH: the model config says WHAT CONFIG, the tensors say FILE" when they differ.
void check_matches(const std::string& path, const std::string& what, int64_t config, int64_t file);
// The patch embedding, channels and classes of `c` against the tensors (check_matches).
void check_common_tensors(const ModelConfig& c, int64_t dim, const TensorSet& ts,
                          const std::string& head);
// A query and a value bias and no key bias ("<attn>.q_bias", "<attn>.v_bias"; BEiT, Eva, Swin
// V2; timm adds zeros for the keys) become the qkv bias [q, 0, v] of our attention. A block with
// only one of them, or with them beside a qkv bias, is an error naming it.
void merge_qv_bias(TensorMap& tensors, const std::string& path);
// Concatenates tensors along dim 0 (f32), in order.
Tensor concat_rows(const std::vector<Tensor>& parts);
// The tensor in f32 (itself when it is already).
Tensor as_f32(const Tensor& t);

// Reading a config's flat JSON: the field's value, or `fallback` when the object has none (a
// file written before the field existed); without a fallback the field is required. Throw
// std::invalid_argument "model config: FIELD must be ..., found ..." for a missing or mistyped
// field, or an integer that does not fit int64.
int64_t json_integer(const nlohmann::json& j, const std::string& key,
                     std::optional<int64_t> fallback = std::nullopt);
std::vector<int64_t> json_integers(const nlohmann::json& j, const std::string& key);
int64_t json_integer_value(const nlohmann::json& v, const std::string& what);
double json_number(const nlohmann::json& j, const std::string& key,
                   std::optional<double> fallback = std::nullopt);
bool json_bool(const nlohmann::json& j, const std::string& key,
               std::optional<bool> fallback = std::nullopt);
std::string json_string(const nlohmann::json& j, const std::string& key,
                        std::optional<std::string> fallback = std::nullopt);

// Throws through `fail` "FIELD must be in LEAST..MOST, found V".
void check_range(const std::function<void(const std::string&)>& fail, const std::string& field,
                 int64_t v, int64_t least, int64_t most);

}  // namespace vitpe
