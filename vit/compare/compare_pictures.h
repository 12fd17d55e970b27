// Pictures of a model's encoding for the comparison report (PNG bytes with captions), drawn by
// encodings/pictures.h.
#pragma once

#include <string>
#include <vector>

#include "vit/compare/results.h"
#include "vit/models/model.h"

namespace vitpe {

// Writes pictures of config.encoding into dir/<encoding>/ and returns them, each with the path
// it was written to (Picture::file). With a trained
// model the learned values are drawn (the token part, and the attention part of every block);
// without one (nullptr), the encoding as initialised. For each of `other_sizes` (pixels per
// side, e.g. the evaluation sizes) the parts whose numbers depend on the grid are drawn again
// there under both extension policies (interpolate, extrapolate): the token part's position
// similarity (ViT Fig. 7) and block 0's attention terms, captioned with size and policy. Rotation
// kinds also draw each block's phase picture, marked with how far every other size's offsets
// reach under each policy. Empty for "none".
std::vector<Picture> encoding_pictures(const ModelConfig& config, Model* trained,
                                       const std::string& dir,
                                       const std::vector<int64_t>& other_sizes = {});

}  // namespace vitpe
