// Swin's windows as data: for one (resolution, window, shift), the token each window slot holds
// (timm's roll by -shift, pad, partition, row-major) and the shift mask; gather and scatter move
// tokens between [B, L, C] and [B * windows, N, C]. The shared residual block (layers.h) runs
// attention inside windows with them.
#pragma once

#include <cstdint>
#include <vector>

#include "encodings/encoding.h"
#include "ops/tensor.h"

namespace vitpe {

// Where each window slot's token comes from, for one (resolution, window, shift).
struct WindowLayout {
  Grid res, window;
  int64_t shift_r = 0, shift_c = 0;
  int64_t windows = 0;          // per image
  std::vector<int32_t> source;  // [windows * window.count()]: token index in [0, L) or -1 (pad)
  Tensor mask;                  // [windows, N, N] (-100 / 0), undefined without shift
};

// Builds the layout (tested against a direct roll/pad/partition of an index image).
WindowLayout make_window_layout(Grid res, Grid window, int64_t shift_r, int64_t shift_c);

// x: [B, L, C] -> xw: [B * windows, N, C] (pad slots zero)
void window_gather(Tensor& xw, const Tensor& x, const WindowLayout& layout);
// dst: [B, L, C] += scatter of xw: [B * windows, N, C] (pad slots dropped)
void window_scatter_add(Tensor& dst, const Tensor& xw, const WindowLayout& layout);
// dst = base + scatter of xw in one pass (the same bits as copying base and adding): every token
// has exactly one slot (the roll is a permutation, the pad adds slots only). dst: [B, L, C], may
// be base itself (the add above).
void window_scatter_add(Tensor& dst, const Tensor& base, const Tensor& xw,
                        const WindowLayout& layout);

}  // namespace vitpe
