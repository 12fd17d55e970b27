// PNG pictures of positional encodings, drawn with OpenCV, for `vitpe encodings show` and the
// HTML report. Each function writes its files atomically (temporary name, then rename) into
// `dir` (created if missing) and returns the paths it wrote.
//
// Token site (TokenEncoding):
//   <kind>_values.png      the table: patches (row-major, prefix rows left out) x channels,
//                          diverging colour map centred on 0, colour bar, axis labels.
//   <kind>_similarity.png  the ViT paper's Figure 7: for each patch, the cosine similarity of its
//                          encoding to every patch, as a grid of small grids, colour bar [-1, 1].
// Attention site (AttentionEncoding), per head, from the centre patch and the top-left patch:
//   <kind>_attention.png   bias kinds: the bias b[h, query, key] over the key grid;
//                          rotation kinds: the rotation-induced score <R(p) q, R(p') k> / hd with
//                          q = k = ones, which equals the mean over channel pairs of
//                          cos(angle(p) - angle(p')) and the average over random q = k.
#pragma once

#include <string>
#include <vector>

#include "encodings/encoding.h"

namespace vitpe {

struct PictureOptions {
  Grid grid{14, 14};
  int64_t dim = 384;
  int64_t heads = 6;
  int64_t prefix = 1;
  uint64_t seed = 0;  // for learned kinds, drawn as initialised
};

// Builds the parts of `spec` (learned kinds as initialised from `seed`) and draws them.
// "none" and conditional kinds (peg: computed from the tokens, no table) draw nothing: an empty
// list when the spec has no other part.
std::vector<std::string> write_encoding_pictures(const std::string& spec,
                                                 const PictureOptions& options,
                                                 const std::string& dir);

// Draws an existing token part (e.g. a trained model's) at `grid`; `title` heads each picture.
std::vector<std::string> write_token_pictures(TokenEncoding& encoding, Grid grid,
                                              const std::string& dir, const std::string& title);

// Draws an existing attention part for `heads` heads of size head_dim at geometry `geom`.
std::vector<std::string> write_attention_pictures(AttentionEncoding& encoding, int64_t heads,
                                                  int64_t head_dim, const AttnGeometry& geom,
                                                  const std::string& dir, const std::string& title);

}  // namespace vitpe
