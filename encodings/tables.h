// Pure builders of the fixed encodings' numbers, timm-style (build_sincos2d_pos_embed): the
// kinds compute their tables with these, and pictures, tests and other backends call the same
// functions instead of writing the formulas again. Angles are computed in double.
#pragma once

#include <cstdint>
#include <vector>

#include "encodings/encoding.h"
#include "ops/tensor.h"

namespace vitpe {

// A frequency ladder's base scaled to a grid (option value "grid" of sincos2d's T and the rotary
// kinds' theta): with frequencies base^(-k/n), k = 0..n-1 per axis, the base at which the slowest
// turns a quarter (pi/2) across the grid's longer side of `side` cells, (2 (side - 1) / pi)^(n /
// (n - 1)); the fastest stays at 1 radian per cell. Long-sequence defaults (10000, 100) leave
// most of a 7-cell axis's frequencies nearly flat; this spreads them over it. n == 1 or side < 2:
// 1 (one frequency, or no distance to span).
double grid_scaled_base(int64_t frequencies, int64_t side);

// 2D sin-cos channel layouts: mae  = [sin(x w) | cos(x w) | sin(y w) | cos(y w)] (MAE's
// get_2d_sincos_pos_embed, the default); timm = [sin(y w) | sin(x w) | cos(y w) | cos(x w)]
// (timm's build_sincos2d_pos_embed). x = column, y = row.
enum class Sincos2dLayout : uint8_t { mae, timm };

// -> [prefix + grid.count(), dim]: row prefix + n holds patch n (row-major), w_k = T^(-k/P),
// P = dim/4, k = 0..P-1; prefix rows are zero. dim % 4 == 0. The coordinates are y = row *
// scale_y and x = column * scale_x (1: integer coordinates; R0/R: rescaled to a built grid).
Tensor sincos2d_table(Grid grid, int64_t dim, int64_t prefix, double temperature,
                      Sincos2dLayout layout, double scale_y = 1, double scale_x = 1);
// One axis of a fixed table on another grid: integer index i becomes the coordinate
// (i - offset) * scale, times ntk_scale(k, n, ntk) for frequency k of the n on the axis
// (encoding.h: the centre policy's anchor is the offset, the ntk policy's axis ratio is ntk).
struct AxisCoordinates {
  double scale = 1;
  int64_t offset = 0;
  double ntk = 1;
};
// sincos2d_table with each axis's coordinates given in full (the overload above: scale alone).
Tensor sincos2d_table(Grid grid, int64_t dim, int64_t prefix, double temperature,
                      Sincos2dLayout layout, AxisCoordinates y, AxisCoordinates x);

// -> [prefix + tokens, dim]: channels (2i, 2i+1) = sin, cos of n * T^(-2i/dim) for the flattened
// patch index n; prefix rows are zero. dim even.
Tensor sincos1d_table(int64_t tokens, int64_t dim, int64_t prefix, double temperature);
// The same channels for arbitrary (fractional) positions: row prefix + n holds positions[n].
Tensor sincos1d_table(const std::vector<double>& positions, int64_t dim, int64_t prefix,
                      double temperature);

// ALiBi's geometric slopes for heads h = 0..H-1: 2^(-8 (h+1) / H).
std::vector<double> alibi2d_slopes(int64_t heads);
// ALiBi's slopes scaled to a window (alibi2d's slopes=grid): the gentlest head's penalty across
// the window's diagonal D = sqrt((R-1)^2 + (C-1)^2) is one logit (1/D per cell; ALiBi's own
// gentlest, 2^-8, puts 0.03 across a 7x7 window) and the steepest keeps ALiBi's 2^(-8/H) per
// cell, the heads between on the geometric ladder; a window too small for a ladder (1/D above
// 2^(-8/H)) gives every head 1/D. One head: 1/D. A 1x1 window counts D as 1.
std::vector<double> alibi2d_grid_slopes(int64_t heads, Grid window);

// How the axial RoPE angles are laid out: the base, which axis the first half of the pairs
// follows (x = column first: timm's grid_indexing 'xy'; y first: 'ij'), and the coordinate
// scale per axis (1 for integer coordinates; timm's ref_feat_shape r on a grid of s cells scales
// by r / s).
// ntk_x, ntk_y: the ntk policy's ratio of the window to the built one per axis (1: off); pair k
// of an axis then turns by its coordinate times ntk_scale(k, hd/4, ratio) as well.
// offset_x, offset_y: added to the scaled coordinates (a training step's coordinate
// augmentation; 0 otherwise): x = column * scale_x + offset_x.
struct RopeAxialLayout {
  double theta = 100;
  bool x_first = true;
  double scale_x = 1, scale_y = 1;
  double ntk_x = 1, ntk_y = 1;
  double offset_x = 0, offset_y = 0;
};

// RoPE-ViT axial angles -> cos, sin: [1, grid.count(), hd/2]. With x first, pair p < hd/4 turns
// by x * theta^(-4k/hd), pair hd/4 + k by y * theta^(-4k/hd) (k = p mod hd/4); x, y the scaled
// coordinates. hd % 4 == 0.
void rope_axial_tables(Tensor& cos, Tensor& sin, Grid grid, int64_t head_dim,
                       const RopeAxialLayout& layout);

// The same angles as frequencies for AttentionTerms::rotation_freqs -> [H, hd/2, 2] (angle =
// x * f[.., 0] + y * f[.., 1] on integer coordinates, so the scales are folded in): with x first,
// pair k < hd/4 has (scale_x theta^(-4k/hd), 0), pair hd/4 + k (0, scale_y theta^(-4k/hd)), each
// times its ntk factor.
Tensor rope_axial_freqs(int64_t heads, int64_t head_dim, const RopeAxialLayout& layout);

// rope-mixed's parameter planes [2, H, hd/2] = (fx, fy) -> frequencies [H, hd/2, 2].
Tensor rope_freqs_from_planes(const Tensor& planes);

}  // namespace vitpe
