// The specs the model tests run every encoding through: each kind of the registry (so a new
// kind is covered without touching the tests) and combinations of both sites.
#pragma once

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

}  // namespace vitpe::testing
