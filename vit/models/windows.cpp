// Swin's windows: layout (roll, pad, partition), the shift mask, gather and scatter (see
// windows.h).
#include "vit/models/windows.h"

#include <cstring>
#include <vector>

#include "ops/op_profile.h"

namespace vitpe {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Region of a padded coordinate for the shift mask: timm labels the slices [0, -M), [-M, -s),
// [-s, end) of each axis; with shift 0 the whole axis is one region.
int region(int64_t pos, int64_t padded, int64_t window, int64_t shift) {
  if (shift == 0) return 0;
  if (pos < padded - window) return 0;
  if (pos < padded - shift) return 1;
  return 2;
}

}  // namespace

WindowLayout make_window_layout(Grid res, Grid window, int64_t shift_r, int64_t shift_c) {
  WindowLayout l;
  l.res = res;
  l.window = window;
  l.shift_r = shift_r;
  l.shift_c = shift_c;
  const int64_t Hp = ceil_div(res.rows, window.rows) * window.rows;
  const int64_t Wp = ceil_div(res.cols, window.cols) * window.cols;
  const int64_t nwr = Hp / window.rows, nwc = Wp / window.cols, N = window.count();
  l.windows = nwr * nwc;
  l.source.resize(l.windows * N);
  std::vector<int> label(l.windows * N);
  for (int64_t wr = 0; wr < nwr; ++wr) {
    for (int64_t wc = 0; wc < nwc; ++wc) {
      const int64_t w = wr * nwc + wc;
      for (int64_t r = 0; r < window.rows; ++r) {
        for (int64_t c = 0; c < window.cols; ++c) {
          // Position in the rolled (by -shift) and then padded image.
          const int64_t R = wr * window.rows + r, C = wc * window.cols + c;
          const int64_t slot = w * N + r * window.cols + c;
          l.source[slot] = (R < res.rows && C < res.cols)
                               ? static_cast<int32_t>(((R + shift_r) % res.rows) * res.cols +
                                                      (C + shift_c) % res.cols)
                               : -1;
          label[slot] =
              region(R, Hp, window.rows, shift_r) * 3 + region(C, Wp, window.cols, shift_c);
        }
      }
    }
  }
  if (shift_r || shift_c) {
    l.mask = Tensor::empty({l.windows, N, N});
    float* m = l.mask.f32();
    for (int64_t w = 0; w < l.windows; ++w)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j)
          m[(w * N + i) * N + j] = label[w * N + i] == label[w * N + j] ? 0.0f : -100.0f;
  }
  return l;
}

void window_gather(Tensor& xw, const Tensor& x, const WindowLayout& l) {
  const int64_t B = x.size(0), L = x.size(1), C = x.size(2), N = l.window.count();
  check_shape("window_gather", "xw", xw, {B * l.windows, N, C});
  if (L != l.res.count()) {
    throw ShapeError("window_gather: expected " + std::to_string(l.res.count()) +
                     " tokens, found " + std::to_string(L));
  }
  const OpScope scope(OpClass::copies);
  const float* src = x.f32();
  float* dst = xw.f32();
  const int64_t slots = l.windows * N;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < slots; ++s) {
      float* out = dst + (b * slots + s) * C;
      const int32_t t = l.source[s];
      if (t < 0)
        std::memset(out, 0, C * sizeof(float));
      else
        std::memcpy(out, src + (b * L + t) * C, C * sizeof(float));
    }
  }
}

void window_scatter_add(Tensor& dst, const Tensor& xw, const WindowLayout& l) {
  window_scatter_add(dst, dst, xw, l);
}

void window_scatter_add(Tensor& dst, const Tensor& base, const Tensor& xw, const WindowLayout& l) {
  const int64_t B = base.size(0), L = base.size(1), C = base.size(2), N = l.window.count();
  check_shape("window_scatter_add", "xw", xw, {B * l.windows, N, C});
  check_shape("window_scatter_add", "dst", dst, base.shape());
  const OpScope scope(OpClass::copies);
  const float* src = xw.f32();
  const float* in = base.f32();
  float* out = dst.f32();
  const int64_t slots = l.windows * N;
  // Each token has at most one slot, so slots write disjoint rows (and read only their own row
  // of base, which may be dst itself).
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < slots; ++s) {
      const int32_t t = l.source[s];
      if (t < 0) continue;
      const int64_t row = (b * L + t) * C;
      const float* i = src + (b * slots + s) * C;
      for (int64_t c = 0; c < C; ++c) out[row + c] = in[row + c] + i[c];
    }
  }
}

}  // namespace vitpe
