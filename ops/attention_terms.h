// The positional terms of one block's attention as data, and the index arithmetic that turns
// them into logit biases and rotation angles. An attention encoding describes itself with
// AttentionTerms (AttentionEncoding::terms); the CPU path expands them into a dense bias with
// attention_terms_bias, the CUDA kernels read them in place (ops/cuda/cuda_ops.h). Both run the
// very functions below (__host__ __device__ under nvcc), so no formula is written twice.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "vitpe/ops/tensor.h"

#ifdef __CUDACC__
#define VITPE_HOST_DEVICE __host__ __device__
#else
#define VITPE_HOST_DEVICE
#endif

namespace vitpe {

// What an attention encoding adds to one block's attention over `prefix` tokens without a 2D
// position followed by a window_rows x window_cols grid (row-major). f32 tensors, all on one
// device; any may be undefined.
struct AttentionTerms {
  int64_t prefix = 0, window_rows = 0, window_cols = 0;
  // Relative-position bias table [(2Mh-1)(2Mw-1) (+3 with prefix tokens), H], timm's layout:
  // bias[h, i, j] = table[relbias_index(i, j), h]; with prefix tokens (BEiT) the last three rows
  // hold prefix->grid (rows-3), grid->prefix (rows-2) and prefix->prefix (rows-1).
  Tensor relative_table;
  // ALiBi-2D slopes [H]: bias = -slope_h * sqrt((sy dy)^2 + (sx dx)^2) between grid tokens, 0
  // with a prefix token; (sy, sx) = distance_scale_y/x (1 unless the encoding rescales the
  // window's coordinates into the range it was built for: the interpolate extension).
  Tensor distance_slopes;
  float distance_scale_y = 1.f, distance_scale_x = 1.f;
  // RoPE frequencies [H, hd/2, 2]: channel pair k of head h of the grid token at (y, x) turns
  // by x * f[h, k, 0] + y * f[h, k, 1]; prefix tokens are not rotated.
  Tensor rotation_freqs;
  // The rotation is only described by rotation_freqs, not given: its pairs are channel halves
  // (c, c + hd/2) on coordinates with an offset (rope-dinov3). Enough for the pictures, which
  // read relative phases; the GPU kernel, which turns neighbouring pairs by the formula above,
  // refuses such terms.
  bool rotation_approximate = false;

  // The same terms on `device` (a copy of each tensor).
  AttentionTerms to(Device device) const;
};

// bias: [H, N, N] (CPU f32, N = prefix + rows*cols) = the terms' bias for every (head, query,
// key); overwritten. Throws ShapeError when a tensor's shape does not fit the geometry.
void attention_terms_bias(Tensor& bias, const AttentionTerms& terms);

// Raw view of the terms (and of a dense bias and mask) for one attention call: pointers to device
// memory in the CUDA kernels, to host memory in attention_terms_bias and the host tests.
struct AttnBiasArgs {
  int B = 0, H = 0, N = 0;
  int prefix = 0, Mh = 0, Mw = 0;  // N = prefix + Mh * Mw when a positional term is used
  const float* dense = nullptr;    // [H, N, N]
  const float* mask = nullptr;     // [mask_windows, N, N], entry b uses b % mask_windows
  int mask_windows = 1;
  const float* table = nullptr;  // [table_rows, H]
  int table_rows = 0;
  const float* slopes = nullptr;       // [H]
  float dist_sy = 1.f, dist_sx = 1.f;  // distance scale per axis (AttentionTerms::distance_scale_*)
  bool shift = false;                  // Swin shift mask
  int shift_r = 0, shift_c = 0, image_rows = 0, image_cols = 0;
  const float* rope = nullptr;  // [H, hd/2, 2]

  VITPE_HOST_DEVICE bool has_positional() const { return table || slopes || shift; }
};

// A token's place: window-local row/column, shift-mask region (0..8), or a prefix token.
struct TokenPos {
  int y, x, region, prefix;
};

// Token t of batch entry b (the window index b % nW matters only for the shift mask).
VITPE_HOST_DEVICE inline TokenPos token_pos(const AttnBiasArgs& a, int b, int t) {
  TokenPos p{0, 0, 0, 1};
  if (t < a.prefix || a.Mw <= 0) return p;
  p.prefix = 0;
  const int u = t - a.prefix;
  p.y = u / a.Mw;
  p.x = u % a.Mw;
  if (a.shift) {
    // Region of the token in the rolled image: slices [0, R-M), [R-M, R-s), [R-s, R) per axis.
    const int nwx = a.image_cols / a.Mw, nw = (a.image_rows / a.Mh) * nwx;
    const int w = b % nw;
    const int gy = (w / nwx) * a.Mh + p.y, gx = (w % nwx) * a.Mw + p.x;
    const int ry = gy < a.image_rows - a.Mh ? 0 : (gy < a.image_rows - a.shift_r ? 1 : 2);
    const int rx = gx < a.image_cols - a.Mw ? 0 : (gx < a.image_cols - a.shift_c ? 1 : 2);
    p.region = ry * 3 + rx;
  }
  return p;
}

// Row of the relative-position table for a query/key pair (timm; BEiT's three extra rows for
// prefix tokens).
VITPE_HOST_DEVICE inline int relbias_index(const AttnBiasArgs& a, TokenPos q, TokenPos k) {
  if (!q.prefix && !k.prefix)
    return (q.y - k.y + a.Mh - 1) * (2 * a.Mw - 1) + (q.x - k.x + a.Mw - 1);
  if (q.prefix && k.prefix) return a.table_rows - 1;
  return q.prefix ? a.table_rows - 3 : a.table_rows - 2;
}

// Positional terms for head h: `tab` is head h's column of the table (stride `tab_stride`:
// H in global memory, 1 when staged in shared memory), `slope` is slopes[h] (or 0).
VITPE_HOST_DEVICE inline float positional_bias(const AttnBiasArgs& a, const float* tab,
                                               int tab_stride, float slope, TokenPos q,
                                               TokenPos k) {
  float s = 0.f;
  if (tab) s += tab[static_cast<ptrdiff_t>(relbias_index(a, q, k)) * tab_stride];
  if (!q.prefix && !k.prefix) {
    if (a.slopes) {
      const float dy = static_cast<float>(q.y - k.y) * a.dist_sy;
      const float dx = static_cast<float>(q.x - k.x) * a.dist_sx;
      s -= slope * sqrtf(dy * dy + dx * dx);
    }
    if (a.shift && q.region != k.region) s += -100.f;
  }
  return s;
}

// Everything added to logit (b, h, i, j): dense bias + dense mask + positional terms.
VITPE_HOST_DEVICE inline float attn_bias_at(const AttnBiasArgs& a, int b, int h, int i, int j) {
  float s = 0.f;
  const size_t NN = static_cast<size_t>(a.N) * a.N, ij = static_cast<size_t>(i) * a.N + j;
  if (a.dense) s += a.dense[h * NN + ij];
  if (a.mask) s += a.mask[(b % a.mask_windows) * NN + ij];
  if (a.has_positional()) {
    s += positional_bias(a, a.table ? a.table + h : nullptr, a.H, a.slopes ? a.slopes[h] : 0.f,
                         token_pos(a, b, i), token_pos(a, b, j));
  }
  return s;
}

// RoPE angle of channel pair k of head h for a token (0 for prefix tokens: not rotated).
VITPE_HOST_DEVICE inline float rope_angle(const AttnBiasArgs& a, int hd, int h, int k, TokenPos p) {
  if (p.prefix) return 0.f;
  const float* f = a.rope + (static_cast<size_t>(h) * (hd / 2) + k) * 2;
  return static_cast<float>(p.x) * f[0] + static_cast<float>(p.y) * f[1];
}

// Relative-table row of tokens i and j (prefix first) of one window: what the table's gradient
// is scattered into.
VITPE_HOST_DEVICE inline int relative_index(const AttnBiasArgs& a, int i, int j) {
  return relbias_index(a, token_pos(a, 0, i), token_pos(a, 0, j));
}

}  // namespace vitpe
