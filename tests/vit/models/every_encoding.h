// The specs the model tests run every encoding through: each kind of the registry (so a new
// kind is covered without touching the tests) and combinations of both sites.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "encodings/encoding.h"
#include "vit/models/model.h"

namespace vitpe::testing {

// Windowed models (Swin) have no conditional site and refuse its kinds (test_swin.cpp checks
// the error), so their list leaves them out.
inline std::vector<std::string> every_encoding_spec(
    AttentionLayout layout = AttentionLayout::global) {
  std::vector<std::string> specs;
  for (const auto& k : encoding_kinds()) {
    if (layout == AttentionLayout::windowed && k.site == EncodingSite::conditional) continue;
    specs.push_back(k.name);
  }
  specs.push_back("learned1d+relbias");
  specs.push_back("rope-mixed+learned1d");
  if (layout == AttentionLayout::global) specs.push_back("sincos2d+peg:after=0+relbias");
  return specs;
}

// What the encoding adds, measured independently of Model::encoding_params(): the parameters of
// the model minus those of the same model without an encoding.
inline int64_t params_added_by_encoding(const ModelConfig& c) {
  ModelConfig none = c;
  none.encoding = "none";
  return make_model(c, 0)->num_params() - make_model(none, 0)->num_params();
}

// Whether every weight of `base` (a model without an encoding) has the same bits in `other`
// (the same architecture with an encoding), by name: the encoding's parameters come from their
// own random stream, so the rest does not depend on the kind. Empty when so, else the first name
// that differs.
inline std::string first_weight_not_shared(Model& base, Model& other) {
  std::map<std::string, const Param*> by_name;
  for (const Param* p : other.params()) by_name[p->name] = p;
  for (const Param* p : base.params()) {
    auto it = by_name.find(p->name);
    if (it == by_name.end() || it->second->value.shape() != p->value.shape() ||
        std::memcmp(it->second->value.f32(), p->value.f32(), p->value.nbytes()) != 0) {
      return p->name;
    }
  }
  return "";
}

}  // namespace vitpe::testing
