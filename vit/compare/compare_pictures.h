// Pictures of a model's encoding for the comparison report (PNG bytes with captions), drawn by
// encodings/pictures.h.
#pragma once

#include <string>
#include <vector>

#include "vit/models/model.h"
#include "vit/compare/report.h"

namespace vitpe {

// Writes pictures of config.encoding into dir/<encoding>/ and returns them. With a trained
// model the learned values are drawn (the token part, and the attention part of the first
// block); without one (nullptr), the encoding as initialised. Empty for "none".
std::vector<Picture> encoding_pictures(const ModelConfig& config, Model* trained,
                                       const std::string& dir);

}  // namespace vitpe
