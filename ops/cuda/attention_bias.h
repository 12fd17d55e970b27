// What the fused attention kernels compute for one (batch entry, head, query, key): the
// in-kernel positional terms (relative-position table, ALiBi-2D, Swin's shift mask), the
// dense bias/mask, and RoPE's rotation angle. Plain __host__ __device__ functions over raw
// pointers, so the kernels and the host tests run the very same index arithmetic: the tests
// check these against independently built dense biases on the CPU, then check the kernels
// against the CPU attention on the device.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host compilers too

#include <cmath>
#include <cstddef>

namespace vitpe::cuda {

// Raw view of AttentionParams for a kernel (pointers to device memory in kernels, to host
// memory in the host tests).
struct AttnBiasArgs {
  int B = 0, H = 0, N = 0;
  int prefix = 0, Mh = 0, Mw = 0;  // N = prefix + Mh * Mw when a positional term is used
  const float* dense = nullptr;    // [H, N, N]
  const float* mask = nullptr;     // [mask_windows, N, N], entry b uses b % mask_windows
  int mask_windows = 1;
  const float* table = nullptr;  // [table_rows, H]
  int table_rows = 0;
  const float* slopes = nullptr;  // [H]
  bool shift = false;             // Swin shift mask
  int shift_r = 0, shift_c = 0, image_rows = 0, image_cols = 0;
  const float* rope = nullptr;  // [H, hd/2, 2]

  __host__ __device__ bool has_positional() const { return table || slopes || shift; }
};

// A token's place: window-local row/column, shift-mask region (0..8), or a prefix token.
struct TokenPos {
  int y, x, region, prefix;
};

// Token t of batch entry b (the window index b % nW matters only for the shift mask).
__host__ __device__ inline TokenPos token_pos(const AttnBiasArgs& a, int b, int t) {
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
__host__ __device__ inline int relbias_index(const AttnBiasArgs& a, TokenPos q, TokenPos k) {
  if (!q.prefix && !k.prefix)
    return (q.y - k.y + a.Mh - 1) * (2 * a.Mw - 1) + (q.x - k.x + a.Mw - 1);
  if (q.prefix && k.prefix) return a.table_rows - 1;
  return q.prefix ? a.table_rows - 3 : a.table_rows - 2;
}

// Positional terms for head h: `tab` is head h's column of the table (stride `tab_stride`:
// H in global memory, 1 when staged in shared memory), `slope` is slopes[h] (or 0).
__host__ __device__ inline float positional_bias(const AttnBiasArgs& a, const float* tab,
                                                 int tab_stride, float slope, TokenPos q,
                                                 TokenPos k) {
  float s = 0.f;
  if (tab) s += tab[static_cast<ptrdiff_t>(relbias_index(a, q, k)) * tab_stride];
  if (!q.prefix && !k.prefix) {
    if (a.slopes) {
      const float dy = static_cast<float>(q.y - k.y), dx = static_cast<float>(q.x - k.x);
      s -= slope * sqrtf(dy * dy + dx * dx);
    }
    if (a.shift && q.region != k.region) s += -100.f;
  }
  return s;
}

// Everything added to logit (b, h, i, j): dense bias + dense mask + positional terms.
__host__ __device__ inline float attn_bias_at(const AttnBiasArgs& a, int b, int h, int i, int j) {
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
__host__ __device__ inline float rope_angle(const AttnBiasArgs& a, int hd, int h, int k,
                                            TokenPos p) {
  if (p.prefix) return 0.f;
  const float* f = a.rope + (static_cast<size_t>(h) * (hd / 2) + k) * 2;
  return static_cast<float>(p.x) * f[0] + static_cast<float>(p.y) * f[1];
}

}  // namespace vitpe::cuda
