// Pictures of a model's encoding for the comparison report (PNG bytes with captions), drawn by
// encodings/pictures.h when that module is present.
#pragma once

#include <string>
#include <vector>

#include "vit/model.h"
#include "vit/report.h"

namespace vitpe {

// Writes the pictures of config.encoding (for config's grid and heads) under dir/<encoding>/
// and returns them; empty when the encoding has nothing to draw.
std::vector<Picture> encoding_pictures(const ModelConfig& config, const std::string& dir);

}  // namespace vitpe
