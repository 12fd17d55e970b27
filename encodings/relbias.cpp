// `relbias`: a learned relative position bias per block (Swin; BEiT for the class token).
//
// Parameter: "attn.relative_position_bias_table" [(2Mh-1)(2Mw-1) (+3), H] (timm's name, relative
// to the block, and shape), initialised as Swin's
// trunc_normal_(std=.02) (bounds +-2 absolute: a plain normal(0, 0.02)). For tokens i, j of
// an Mh x Mw window (row-major, y = row, x = column):
//   idx(i, j) = (y_i - y_j + Mh - 1) * (2Mw - 1) + (x_i - x_j + Mw - 1),  bias[h, i, j] =
//   table[idx, h].
// Prefix tokens: learned kind. Built with prefix > 0 the table has 3 extra rows at its end, as
// BEiT's: L = (2Mh-1)(2Mw-1); row L for pairs (prefix query -> patch key), L+1 for (patch query ->
// prefix key), L+2 for (prefix -> prefix). Every prefix token shares them (BEiT has one).
// Resampling to another window: the main rows as H planes [2Mh-1, 2Mw-1] -> [2Mh'-1, 2Mw'-1],
// the 3 extra rows kept (as timm), by option resize:
//   bicubic (default)  F.interpolate bicubic, antialias=True, align_corners=False (as timm resizes
//                      Swin's tables and abs. position embeddings);
//   beit               timm's resize_rel_pos_bias_table, which its BEiT checkpoint_filter_fn uses:
//                      unilm's geometric source offsets, linear, border held (ops/resample.h,
//                      resample_beit).
// Under the extrapolate policy the table is not resampled: an offset past the largest trained one
// takes the entry of the largest (offsets clamped to +-(Mh-1), +-(Mw-1) per axis).
// bias() for another window uses a cached resampled table; bias_backward() then goes through the
// adjoint of the same resampling; resample(new_window) replaces the table by it.
// Backward: the table's gradient is the scatter-sum of dbias over the pairs that share an index.
#include <cstring>

#include "encodings/kinds.h"
#include "ops/resample.h"

namespace vitpe::enc {

namespace {

// How the table meets another window (option resize).
enum class Resize : uint8_t { bicubic, beit };

class RelBias final : public BiasAttentionEncoding {
 public:
  RelBias(int64_t heads, Grid window, int64_t prefix, Resize resize, Rng& rng)
      : heads_(heads), window_(window), extra_(prefix > 0 ? 3 : 0), resize_(resize) {
    require(heads >= 1, "relbias", "heads must be >= 1, got " + std::to_string(heads));
    check_grid("relbias", window);
    param_.name = "attn.relative_position_bias_table";
    param_.value = Tensor::empty({main_rows(window) + extra_, heads});
    rng.fill_normal(param_.value, 0.02);  // = timm's trunc_normal_(std=.02): bounds +-2 are 100 std
    param_.grad = Tensor::zeros(param_.value.shape());
    param_.no_decay = true;
  }

  std::string kind() const override { return "relbias"; }

  // The table for the geometry's window (resampled and cached when it differs).
  AttentionTerms terms(const AttnGeometry& geom) override {
    check(geom);
    AttentionTerms t = AttentionEncoding::terms(geom);
    t.relative_table = table_for(geom.window);
    return t;
  }

  // bias: [H, N, N], N = prefix + Mh*Mw
  void bias(Tensor& bias, const AttnGeometry& geom) override {
    check_shape("relbias bias", "bias", bias, {heads_, geom.tokens(), geom.tokens()});
    attention_terms_bias(bias, terms(geom));
  }

  // dbias: [H, N, N] -> table gradient (scatter-sum over the pairs that share a row)
  void bias_backward(const Tensor& dbias, const AttnGeometry& geom) override {
    check(geom);
    check_shape("relbias bias_backward", "dbias", dbias, {heads_, geom.tokens(), geom.tokens()});
    const int64_t N = geom.tokens(), L = main_rows(geom.window);
    const bool own = geom.window == window_;
    Tensor g = own ? param_.grad : Tensor::zeros({L + extra_, heads_});
    AttnBiasArgs a;
    a.N = static_cast<int>(N);
    a.prefix = static_cast<int>(geom.prefix);
    a.Mh = static_cast<int>(geom.window.rows);
    a.Mw = static_cast<int>(geom.window.cols);
    a.table_rows = static_cast<int>(L + extra_);
    float* gt = g.f32();
    for (int64_t h = 0; h < heads_; ++h) {
      const float* d = dbias.f32() + h * N * N;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j)
          gt[relative_index(a, static_cast<int>(i), static_cast<int>(j)) * heads_ + h] +=
              d[i * N + j];
    }
    if (own) return;
    // Through the adjoint of the resampling of the main rows; extra rows map one to one.
    Tensor mine = from_planes(resize_planes_backward(to_planes(g, geom.window)), window_);
    for (int64_t i = 0; i < mine.numel(); ++i) param_.grad.f32()[i] += mine.f32()[i];
    for (int64_t i = 0; i < extra_ * heads_; ++i)
      param_.grad.f32()[main_rows(window_) * heads_ + i] += gt[L * heads_ + i];
  }

  void resample(Grid new_window) override {
    check_grid("relbias", new_window);
    if (new_window == window_) return;
    param_.value = resampled(new_window);
    param_.grad = Tensor::zeros(param_.value.shape());
    window_ = new_window;
    cache_.clear();
  }

  std::vector<Param*> params() override { return {&param_}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::interpolate);
  }

 protected:
  void policy_changed() override { cache_.clear(); }

 private:
  static int64_t main_rows(Grid w) { return (2 * w.rows - 1) * (2 * w.cols - 1); }

  void check(const AttnGeometry& geom) const {
    check_grid("relbias", geom.window);
    require(geom.prefix == 0 || extra_ > 0, "relbias",
            "built without prefix tokens (no class-token entries in the table), but asked for " +
                std::to_string(geom.prefix) + " prefix tokens");
  }

  const Tensor& table_for(Grid w) {
    if (w == window_) return param_.value;
    return cache_.get(w, {&param_.value}, [&] { return resampled(w); });
  }

  // [L + extra, H] -> planes [H, 2Mh-1, 2Mw-1] of the main rows
  Tensor to_planes(const Tensor& table, Grid w) const {
    const int64_t L = main_rows(w);
    Tensor p = Tensor::empty({heads_, 2 * w.rows - 1, 2 * w.cols - 1});
    for (int64_t r = 0; r < L; ++r)
      for (int64_t h = 0; h < heads_; ++h) p.f32()[h * L + r] = table.f32()[r * heads_ + h];
    return p;
  }
  // planes [H, 2Mh-1, 2Mw-1] -> [L + extra, H] with the extra rows zero
  Tensor from_planes(const Tensor& planes, Grid w) const {
    const int64_t L = main_rows(w);
    Tensor t = Tensor::zeros({L + extra_, heads_});
    for (int64_t r = 0; r < L; ++r)
      for (int64_t h = 0; h < heads_; ++h) t.f32()[r * heads_ + h] = planes.f32()[h * L + r];
    return t;
  }

  // planes [H, 2Mh-1, 2Mw-1] of the built window -> [H, 2Mh'-1, 2Mw'-1] of w
  Tensor resize_planes(const Tensor& planes, Grid w) const {
    const int64_t h = 2 * w.rows - 1, wd = 2 * w.cols - 1;
    if (extension_rule() == ExtensionRule::extrapolate)
      return resample_hold_edges(planes, h, wd, true);
    return resize_ == Resize::beit ? resample_beit(planes, h, wd)
                                   : vitpe::resample(planes, h, wd, Filter::bicubic, true);
  }
  // The adjoint: dplanes [H, 2Mh'-1, 2Mw'-1] of another window -> [H, 2Mh-1, 2Mw-1] of the built
  // one.
  Tensor resize_planes_backward(const Tensor& dplanes) const {
    const int64_t h = 2 * window_.rows - 1, wd = 2 * window_.cols - 1;
    if (extension_rule() == ExtensionRule::extrapolate)
      return resample_hold_edges_backward(dplanes, h, wd, true);
    return resize_ == Resize::beit ? resample_beit_backward(dplanes, h, wd)
                                   : resample_backward(dplanes, h, wd, Filter::bicubic, true);
  }

  Tensor resampled(Grid w) const {
    Tensor t = from_planes(resize_planes(to_planes(param_.value, window_), w), w);
    std::memcpy(t.f32() + main_rows(w) * heads_, param_.value.f32() + main_rows(window_) * heads_,
                sizeof(float) * extra_ * heads_);
    return t;
  }

  int64_t heads_;
  Grid window_;
  int64_t extra_;
  Resize resize_;
  Param param_;
  DerivedCache cache_;
};

}  // namespace

KindDef relbias_kind() {
  KindDef k;
  k.name = "relbias";
  k.site = Site::attention;
  k.summary = "learned bias table [(2Mh-1)(2Mw-1)(+3 class entries), H] per block (Swin, BEiT)";
  k.extension = ExtensionRule::interpolate;
  k.options = {{"resize",
                "bicubic",
                "how the table is resampled for another window: bicubic (F.interpolate, "
                "antialias) or beit (timm's BEiT checkpoint resize: geometric offsets, linear)",
                {"bicubic", "beit"}}};
  k.extension_note =
      "the (2Mh-1)x(2Mw-1) bias table is resampled to the new window, bicubic (resize=bicubic) or "
      "by timm's BEiT resize (resize=beit: geometric offsets, linear, border held); class entries "
      "kept; extrapolate: offsets past the trained ones clamped to the largest";
  k.make_attention = [](const Options& o, int64_t heads, int64_t, Grid window, int64_t prefix,
                        Rng& rng) {
    const Resize resize = o.str("resize") == "beit" ? Resize::beit : Resize::bicubic;
    return std::make_unique<RelBias>(heads, window, prefix, resize, rng);
  };
  return k;
}

}  // namespace vitpe::enc
