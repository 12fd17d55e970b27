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
//   <kind>_phase.png       rotation kinds: the phase sin(f . d) of every channel pair against the
//                          query-key offset d along x and along y, in the built window's
//                          coordinates, the offsets that window holds unshaded, and marks where a
//                          larger window's offsets reach under each extension policy.
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

// How far a window's query-key offsets reach, in the coordinates of the window the encoding was
// built for (its integer offsets): a larger window extrapolated reaches its own extent, one
// interpolated is rescaled into about the built range.
struct PhaseReach {
  std::string label;  // e.g. "56 px, extrapolate"
  double x = 0, y = 0;
};

// The reach of `other`'s offsets under the encoding's current extension policy, measured from its
// rotation frequencies at `other` against those at `built`: (other extent - 1) times the ratio of
// the frequencies. Throws std::invalid_argument for a kind without rotation.
PhaseReach phase_reach(AttentionEncoding& encoding, const AttnGeometry& built,
                       const AttnGeometry& other, const std::string& label);

// Rotation kinds: draws <kind>_phase.png (see above) for `heads` heads at the built geometry, with
// a mark at each reach. Frequencies are read at `built` under the current policy, which leaves a
// window's own coordinates unscaled. Throws std::invalid_argument for a kind without rotation.
std::vector<std::string> write_phase_picture(AttentionEncoding& encoding, int64_t heads,
                                             const AttnGeometry& built,
                                             const std::vector<PhaseReach>& reaches,
                                             const std::string& dir, const std::string& title);

}  // namespace vitpe
