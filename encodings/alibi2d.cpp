// `alibi2d`: ALiBi extended to 2D, a fixed distance penalty added to the attention logits:
//   bias[h, i, j] = -slope_h * sqrt((y_i - y_j)^2 + (x_i - x_j)^2),  slope_h = 2^(-8 (h+1) / H)
// for heads h = 0..H-1 (ALiBi's geometric slopes 2^(-8/H), 2^(-16/H), ..., 2^(-8)); slopes=grid
// scales the ladder to the built window (alibi2d_grid_slopes), fixed once built.
// Prefix tokens: fixed kind, bias 0 for every pair involving one. No parameters; any window
// works (it extrapolates to any size), so it keeps the interface's resample() (a check only).

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

class Alibi2d final : public BiasAttentionEncoding {
 public:
  Alibi2d(int64_t heads, Grid window, bool grid_slopes) : heads_(heads), window_(window) {
    require(heads >= 1, "alibi2d", "heads must be >= 1, got " + std::to_string(heads));
    check_grid("alibi2d", window);
    const std::vector<double> s =
        grid_slopes ? alibi2d_grid_slopes(heads, window) : alibi2d_slopes(heads);
    slopes_ = Tensor::empty({heads});
    for (int64_t h = 0; h < heads; ++h) slopes_.at(h) = static_cast<float>(s[h]);
  }

  std::string kind() const override { return "alibi2d"; }

  // The slopes; the distances come with the geometry.
  AttentionTerms terms(const AttnGeometry& geom) override {
    check_grid("alibi2d", geom.window);
    AttentionTerms t = AttentionEncoding::terms(geom);
    t.distance_slopes = slopes_;
    if (extension_rule() == ExtensionRule::interpolate) {
      // Distances measured in the built window's units: dy R0/R, dx C0/C.
      t.distance_scale_y = static_cast<float>(static_cast<double>(window_.rows) / geom.window.rows);
      t.distance_scale_x = static_cast<float>(static_cast<double>(window_.cols) / geom.window.cols);
    }
    return t;
  }

  // bias: [H, N, N]
  void bias(Tensor& bias, const AttnGeometry& geom) override {
    check_shape("alibi2d bias", "bias", bias, {heads_, geom.tokens(), geom.tokens()});
    attention_terms_bias(bias, terms(geom));
  }
  void bias_backward(const Tensor&, const AttnGeometry&) override {}

  std::vector<Param*> params() override { return {}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::extrapolate);
  }

 private:
  int64_t heads_;
  Grid window_;    // the built window
  Tensor slopes_;  // [H]
};

}  // namespace

KindDef alibi2d_kind() {
  KindDef k;
  k.name = "alibi2d";
  k.site = Site::attention;
  k.options = {{"slopes",
                "alibi",
                "alibi: ALiBi's 2^(-8h/H), h = 1..H; grid: scaled to the built window (the "
                "gentlest head puts one logit across its diagonal, the steepest keeps 2^(-8/H))",
                {"alibi", "grid"}}};
  k.summary = "fixed bias -2^(-8h/H) * Euclidean distance, heads h = 1..H (2D ALiBi); no params";
  k.extension = ExtensionRule::extrapolate;
  k.extension_note =
      "distances grow with the grid (the same slopes); interpolate: distances scaled per axis "
      "into the built window's units (dy R0/R, dx C0/C)";
  k.make_attention = [](const Options& o, int64_t heads, int64_t, Grid window, int64_t, Rng&) {
    return std::make_unique<Alibi2d>(heads, window, o.str("slopes") == "grid");
  };
  return k;
}

}  // namespace vitpe::enc
