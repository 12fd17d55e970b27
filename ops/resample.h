// Resampling of float planes [C, H, W] -> [C, H', W'], as PyTorch's F.interpolate with
// align_corners=False, for position tables (timm's resample_abs_pos_embed, relative-bias
// tables) and images; and BEiT's geometric resize of relative-bias tables (resample_beit, below).
//
// Separable: every output sample of an axis is a weighted sum of a contiguous run of input
// samples ("taps"); the W axis is resampled first, then the H axis (PyTorch's order).
//
// - antialias = false: PyTorch's classic kernels. bilinear: source x = scale*(i+0.5)-0.5,
//   clamped at 0, two taps. bicubic: Keys' cubic with a = -0.75, four taps at
//   floor(x)-1..floor(x)+2 with indices clamped to the border (clamped taps merged).
// - antialias = true: PyTorch's antialiased kernels (the path of
//   F.interpolate(..., antialias=True), which timm uses): the filter (triangle for bilinear,
//   Keys' cubic with a = -0.5 for bicubic) is centred at scale*(i+0.5) in input pixel units,
//   its support is widened by the scale when downsampling (scale = in/out > 1), taps outside
//   the input are dropped and the weights renormalised to sum to 1. When upsampling, the
//   antialiased bilinear equals the classic one; the antialiased bicubic does not (a = -0.5 and
//   renormalised borders instead of a = -0.75 and clamping).
//
// Usage:
//   Tensor y = resample(x, /*out_h=*/24, /*out_w=*/20, Filter::bicubic, /*antialias=*/true);
// Same size in and out returns a copy (the identity, as PyTorch).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace vitpe {

enum class Filter : uint8_t { bilinear, bicubic };

// The weights of one axis: out[i] = sum_{t < count[i]} weight[i * max_taps + t] * in[start[i] + t].
struct ResampleTaps {
  int64_t in_size = 0, out_size = 0, max_taps = 0;
  std::vector<int64_t> start, count;  // [out_size]
  std::vector<float> weight;          // [out_size * max_taps]
};

// The taps of one axis of in_size samples resampled to out_size samples (both >= 1).
ResampleTaps resample_taps(int64_t in_size, int64_t out_size, Filter filter, bool antialias);

// x: [C, H, W] -> [C, out_h, out_w] (CPU f32; a 2-D [H, W] input is treated as C = 1 and
// returns [out_h, out_w]).
Tensor resample(const Tensor& x, int64_t out_h, int64_t out_w, Filter filter, bool antialias);

// The adjoint (transpose) of resample, for gradients: dy: [C, out_h, out_w] ->
// dx: [C, in_h, in_w], overwritten.
Tensor resample_backward(const Tensor& dy, int64_t in_h, int64_t in_w, Filter filter,
                         bool antialias);

// Raw-pointer forms (C contiguous planes): out is overwritten.
void resample_planes(const float* x, int64_t c, int64_t h, int64_t w, float* y, int64_t out_h,
                     int64_t out_w, Filter filter, bool antialias);
void resample_planes_backward(const float* dy, int64_t c, int64_t out_h, int64_t out_w, float* dx,
                              int64_t h, int64_t w, Filter filter, bool antialias);

// BEiT's resize of relative-position planes: timm's resize_rel_pos_bias_table without scipy (its
// default; unilm's geometric offsets, with timm's linear RegularGridInterpolator in place of
// scipy's cubic interp2d), which timm's beit checkpoint_filter_fn applies when a checkpoint meets
// another window. Both sizes of an axis count relative offsets, so they are odd: src = 2M-1
// samples at offsets p_0..p_{src-1}, dst = 2M'-1 at t = -m..m, m = dst // 2. Per axis:
// clang-format off
//   n = src // 2;  gp(q) = (1 - q^n) / (1 - q)          (= 1 + q + ... + q^(n-1))
//   q: bisection on [left, right] = [1.01, 1.5] while right - left > 1e-6:
//        q = (left + right) / 2;  if gp(q) > m: right = q  else left = q;   q = the last midpoint
//   d_k = 1 + q + ... + q^(k-1), k = 1..n;  p = (-d_n, ..., -d_1, 0, d_1, ..., d_n) in float32
//   for t: r = the first index with p_r >= t (src-1 if none), l = max(r-1, 0),
//          a = max(t - p_l, 0), b = max(p_r - t, 0) (a = b = 1 when both are 0),
//          out(t) = (b in[l] + a in[r]) / (a + b)
// clang-format on
// so targets beyond the outermost source offsets take the border value (held, no extrapolation).
// The 2-D interpolation is the product of the two axes' weights (timm's numerator over
// denominator factorises); the weights are computed in double from the float32 offsets (timm:
// in float32; they differ by an ulp or so). q is confined to [1.01, 1.5]: shrinking ends near
// q = 1.01 (source offsets spread wider than the targets), m > gp(1.5) ends near 1.5 (the outer
// targets take the border value). An axis whose size stays is still resampled (q ~ 1.01, not the
// identity) when the other axis changes, as timm does; the same size in both axes returns a copy.
//
// The taps of one axis (two per output, or one where both fall on the same sample); sizes odd.
ResampleTaps beit_resample_taps(int64_t in_size, int64_t out_size);
// x: [C, H, W] -> [C, out_h, out_w] (or [H, W] -> [out_h, out_w]); all four sizes odd.
Tensor resample_beit(const Tensor& x, int64_t out_h, int64_t out_w);
// The adjoint (transpose) of resample_beit: dy: [C, out_h, out_w] -> dx: [C, in_h, in_w].
Tensor resample_beit_backward(const Tensor& dy, int64_t in_h, int64_t in_w);

// FlexiViT's pseudo-inverse resize of convolution kernels (Beyer et al. 2023, "PI-resize"):
// w: [..., h, w] (e.g. a patch embedding [D, C, p, p]) -> [..., out_h, out_w]. With B the
// matrix of the bilinear resize of an h x w patch to out_h x out_w (resample with
// antialias = false, a column per input pixel), every kernel becomes pinv(B^T) w: when the kernel
// grows (B of full column rank) <resize(x), w'> = <x, w> for every patch x, so a patch and its
// resized copy give the same token; when it shrinks, the least-squares fit of the same
// equations. Solved in double (Cholesky of B^T B or B B^T). Same size: a copy.
Tensor pi_resize_kernel(const Tensor& w, int64_t out_h, int64_t out_w);

// Holding the edges: the extrapolate way to meet another size with a learned table. Output
// sample i of an axis takes input sample clamp(i - offset, 0, in_size - 1): offset 0 anchors
// absolute tables at their first row/column (the new rows past the end repeat the last one),
// offset (out - in) / 2 centres relative-offset tables (offsets past the largest trained one
// take its value). x: [C, H, W] -> [C, out_h, out_w] (or [H, W] -> [out_h, out_w]).
ResampleTaps hold_edges_taps(int64_t in_size, int64_t out_size, int64_t offset);
Tensor resample_hold_edges(const Tensor& x, int64_t out_h, int64_t out_w, bool centred);
// The adjoint: dy: [C, out_h, out_w] -> dx: [C, in_h, in_w] (every output's gradient summed into
// the sample it copies).
Tensor resample_hold_edges_backward(const Tensor& dy, int64_t in_h, int64_t in_w, bool centred);

}  // namespace vitpe
