// The explicit list of model families (vit/models/family.h). A new family is a folder under
// vit/models/ defining its FamilyDef, and one line here.
#include <stdexcept>

#include "ops/util.h"
#include "vit/models/family.h"

namespace vitpe {

const FamilyDef& vit_family_def();   // vit/models/vit/family.cpp
const FamilyDef& swin_family_def();  // vit/models/swin/family.cpp
const FamilyDef& dinov2_family_def();  // vit/models/dinov2/family.cpp
const FamilyDef& clip_family_def();    // vit/models/clip/family.cpp
const FamilyDef& siglip_family_def();  // vit/models/siglip/family.cpp
const FamilyDef& dinov3_family_def();  // vit/models/dinov3/family.cpp

const std::vector<const FamilyDef*>& families() {
  static const std::vector<const FamilyDef*> list = {
      &vit_family_def(),
      &swin_family_def(),
      &dinov2_family_def(),
      &clip_family_def(),
      &siglip_family_def(),
      &dinov3_family_def(),
  };
  return list;
}

const FamilyDef& family(const std::string& name) {
  std::vector<std::string> known;
  for (const FamilyDef* f : families()) {
    if (f->name == name) return *f;
    known.push_back(f->name);
  }
  throw std::invalid_argument("unknown model family '" + name + "' (known: " + join(known, ", ") +
                              ")");
}

const FamilyDef& family_of(const ModelConfig& config) { return family(config.family); }

DialectMatch recognise_checkpoint(const std::vector<std::string>& names) {
  DialectMatch best;
  int best_score = 0;
  for (const FamilyDef* f : families()) {
    for (const CheckpointDialect& d : f->dialects) {
      const int score = d.recognise(names);
      if (score > best_score) {
        best = {f, &d};
        best_score = score;
      }
    }
  }
  if (best.family) return best;
  std::vector<std::string> dialects;
  for (const FamilyDef* f : families()) {
    for (const CheckpointDialect& d : f->dialects) dialects.push_back(d.name);
  }
  throw std::runtime_error(
      "unrecognised checkpoint: no vitpe metadata and none of the tensor names of the layouts "
      "vitpe reads (" +
      join(dialects, ", ") +
      "; e.g. 'blocks.0.attn.qkv.weight', 'encoder.layers.encoder_layer_0...', "
      "'layers.0.blocks.0...', 'features.0.0.weight')");
}

DialectMatch dialect(const std::string& name) {
  std::vector<std::string> known;
  for (const FamilyDef* f : families()) {
    for (const CheckpointDialect& d : f->dialects) {
      if (d.name == name) return {f, &d};
      known.push_back(d.name);
    }
  }
  throw std::invalid_argument("unknown checkpoint layout '" + name +
                              "' (known: " + join(known, ", ") + ")");
}

}  // namespace vitpe
