// `alibi2d`: ALiBi extended to 2D, a fixed distance penalty added to the attention logits:
//   bias[h, i, j] = -slope_h * sqrt((y_i - y_j)^2 + (x_i - x_j)^2),  slope_h = 2^(-8 (h+1) / H)
// for heads h = 0..H-1 (ALiBi's geometric slopes 2^(-8/H), 2^(-16/H), ..., 2^(-8)).
// Prefix tokens: fixed kind, bias 0 for every pair involving one. No parameters; any window
// works (it extrapolates to any size), so it keeps the interface's resample() (a check only).
#include <cmath>

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

class Alibi2d final : public BiasAttentionEncoding {
 public:
  Alibi2d(int64_t heads, Grid window) : heads_(heads) {
    require(heads >= 1, "alibi2d", "heads must be >= 1, got " + std::to_string(heads));
    check_grid("alibi2d", window);
  }

  std::string kind() const override { return "alibi2d"; }

  // bias: [H, N, N]
  void bias(Tensor& bias, const AttnGeometry& geom) override {
    check_grid("alibi2d", geom.window);
    const int64_t N = geom.tokens(), P = geom.prefix, C = geom.window.cols;
    check_shape("alibi2d bias", "bias", bias, {heads_, N, N});
    const std::vector<double> slopes = alibi2d_slopes(heads_);
    for (int64_t h = 0; h < heads_; ++h) {
      const double slope = slopes[h];
      float* b = bias.f32() + h * N * N;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) {
          if (i < P || j < P) {
            b[i * N + j] = 0.f;
            continue;
          }
          double dy = static_cast<double>(patch_row(i - P, C) - patch_row(j - P, C));
          double dx = static_cast<double>(patch_col(i - P, C) - patch_col(j - P, C));
          b[i * N + j] = static_cast<float>(-slope * std::sqrt(dy * dy + dx * dx));
        }
    }
  }
  void bias_backward(const Tensor&, const AttnGeometry&) override {}

  std::vector<Param*> params() override { return {}; }

 private:
  int64_t heads_;
};

}  // namespace

KindDef alibi2d_kind() {
  KindDef k;
  k.name = "alibi2d";
  k.site = Site::attention;
  k.summary = "fixed bias -2^(-8h/H) * Euclidean distance, heads h = 1..H (2D ALiBi); no params";
  k.extension = Extension::extrapolate;
  k.extension_note = "distances grow with the grid (the same slopes)";
  k.make_attention = [](const Options&, int64_t heads, int64_t, Grid window, int64_t, Rng&) {
    return std::make_unique<Alibi2d>(heads, window);
  };
  return k;
}

}  // namespace vitpe::enc
