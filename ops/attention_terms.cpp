// The CPU side of AttentionTerms (see attention_terms.h): copies to a device and the dense bias,
// computed with the same per-element functions the CUDA kernels run.
#include "ops/attention_terms.h"

#include <string>
#include <vector>

namespace vitpe {

AttentionTerms AttentionTerms::to(Device device) const {
  AttentionTerms t = *this;
  for (Tensor* x : {&t.relative_table, &t.distance_slopes, &t.rotation_freqs}) {
    if (x->defined()) *x = x->to(device);
  }
  return t;
}

void attention_terms_bias(Tensor& bias, const AttentionTerms& t) {
  const char* op = "attention_terms_bias";
  check_cpu_f32(op, "bias", bias);
  if (bias.ndim() != 3 || bias.size(1) != bias.size(2)) {
    throw ShapeError(std::string(op) + ": expected bias [H, N, N], found " + bias.shape().str());
  }
  const int64_t H = bias.size(0), N = bias.size(1);
  const int64_t Mh = t.window_rows, Mw = t.window_cols;
  if (Mh <= 0 || Mw <= 0 || t.prefix < 0 || t.prefix + Mh * Mw != N) {
    throw ShapeError(std::string(op) + ": a " + std::to_string(Mh) + "x" + std::to_string(Mw) +
                     " window with " + std::to_string(t.prefix) +
                     " prefix tokens does not give the N = " + std::to_string(N) +
                     " tokens of bias " + bias.shape().str());
  }
  AttnBiasArgs a;
  a.B = 1;
  a.H = static_cast<int>(H);
  a.N = static_cast<int>(N);
  a.prefix = static_cast<int>(t.prefix);
  a.Mh = static_cast<int>(Mh);
  a.Mw = static_cast<int>(Mw);
  if (t.relative_table.defined()) {
    const int64_t rows = (2 * Mh - 1) * (2 * Mw - 1) + (t.prefix > 0 ? 3 : 0);
    check_cpu_f32(op, "relative_table", t.relative_table);
    check_shape(op, "relative_table", t.relative_table, Shape{rows, H});
    a.table = t.relative_table.f32();
    a.table_rows = static_cast<int>(rows);
  }
  if (t.distance_slopes.defined()) {
    check_cpu_f32(op, "distance_slopes", t.distance_slopes);
    check_shape(op, "distance_slopes", t.distance_slopes, Shape{H});
    a.slopes = t.distance_slopes.f32();
    a.dist_sy = t.distance_scale_y;
    a.dist_sx = t.distance_scale_x;
  }
  // attn_bias_at of entry (h, i, j) with no dense bias or mask: the positional terms of tokens
  // i and j, whose places are found once each here instead of once per entry (a division and a
  // remainder each: most of the time of a per-entry call, run for every Swin block).
  std::vector<TokenPos> pos(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; ++t) pos[t] = token_pos(a, 0, static_cast<int>(t));
  float* out = bias.f32();
#pragma omp parallel for collapse(2)
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < N; ++i) {
      const float* tab = a.table ? a.table + h : nullptr;
      const float slope = a.slopes ? a.slopes[h] : 0.f;
      float* row = out + (h * N + i) * N;
      for (int64_t j = 0; j < N; ++j) row[j] = positional_bias(a, tab, a.H, slope, pos[i], pos[j]);
    }
  }
}

}  // namespace vitpe
