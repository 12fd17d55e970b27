// `rope-axial`: RoPE-ViT's axial rotary embedding (Heo et al. 2024), fixed and shared by all
// blocks and heads. Channel pairs (2p, 2p+1) of each head rotate by an angle:
//   pairs p < hd/4:        x * theta_k,  k = p           (x = column)
//   pairs p >= hd/4:       y * theta_k,  k = p - hd/4    (y = row)
//   theta_k = theta^(-4k/hd), option theta (default 100, as published).
// Same rotation as timm's Eva vit_*_rope_* models (RotaryEmbeddingCat, temperature 100,
// grid_indexing 'xy', interleaved pairs; checked by a golden). Options for timm's other Eva
// models: indexing=ij puts y on the first half of the pairs (timm's default grid_indexing, e.g.
// vit_*_rope_reg*_gap_256, theta 10000); ref=RxC is timm's ref_feat_shape: on an Mh x Mw
// window the coordinates are scaled to the reference, y * R / Mh and x * C / Mw (the same range
// on every window: the `interpolate` way to meet another grid), where ref=none keeps integer
// coordinates (they run past the trained range on a larger grid: `extrapolate`).
// head_dim % 4 == 0. Prefix tokens: fixed kind, not rotated (angle zero). No parameters; any
// window works, so it keeps the interface's resample(), which only checks the window.
// Training augmentation (DINOv3's, on the patch indices; options shift=S, jitter=J, rescale=R):
// during a training step the indices are scaled about the window's centre and shifted by that
// step's draw (kinds.h integer_axis), the same in every block; evaluation uses the plain ones.
#include <algorithm>
#include <deque>
#include <optional>

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

class RopeAxial final : public RotationAttentionEncoding {
 public:
  RopeAxial(int64_t heads, int64_t head_dim, Grid window, double theta, bool x_first, Grid ref,
            const CoordinateAugmentation& aug)
      : heads_(heads),
        hd_(head_dim),
        theta_(theta),
        x_first_(x_first),
        window_(window),
        ref_(ref),
        aug_(aug) {
    require(head_dim % 4 == 0, "rope-axial",
            "head_dim must be divisible by 4 (pairs split between x and y), got " +
                std::to_string(head_dim));
    check_grid("rope-axial", window);
  }

  std::string kind() const override { return "rope-axial"; }

  // q, k: [B, H, N, hd] -> rotated copies
  void rotate(Tensor& q_out, Tensor& k_out, const Tensor& q, const Tensor& k,
              const AttnGeometry& geom) override {
    check_qk("rope-axial", q, k, heads_, hd_, geom);
    const Tables& t = tables(geom.window);
    rope_rotate(q_out, q, t.cos, t.sin, geom.prefix);
    rope_rotate(k_out, k, t.cos, t.sin, geom.prefix);
  }

  void rotate_qkv_rows(Tensor& qkv, int64_t heads, const AttnGeometry& geom) override {
    check_grid("rope-axial", geom.window);
    const Tables& t = tables(geom.window);
    rope_rotate_qkv_rows(qkv, heads, t.cos, t.sin, geom.prefix);
  }

  void rotate_backward(Tensor& dq, Tensor& dk, const Tensor& dq_out, const Tensor& dk_out,
                       const Tensor& q, const Tensor& k, const AttnGeometry& geom) override {
    check_qk("rope-axial", q, k, heads_, hd_, geom);
    const Tables& t = tables(geom.window);
    Tensor none;
    rope_rotate_backward(dq, none, dq_out, q, t.cos, t.sin, geom.prefix);
    rope_rotate_backward(dk, none, dk_out, k, t.cos, t.sin, geom.prefix);
  }

  AttentionTerms terms(const AttnGeometry& geom) override {
    check_grid("rope-axial", geom.window);
    AttentionTerms t = AttentionEncoding::terms(geom);
    t.rotation_freqs = rope_axial_freqs(heads_, hd_, layout(geom.window));
    return t;
  }

  std::vector<Param*> params() override { return {}; }
  // ref=RxC scales the coordinates to the reference on every window (interpolate), ref=none
  // keeps integer coordinates (extrapolate).
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_,
                        ref_.rows > 0 ? ExtensionRule::interpolate : ExtensionRule::extrapolate,
                        {.frequencies = true});
  }

  bool augments() const override { return aug_.any(); }

 protected:
  void policy_changed() override {
    cache_.clear();
    augmented_.reset();
  }
  void augmentation_changed() override { augmented_.reset(); }

 private:
  struct Tables {
    Grid window;
    Tensor cos, sin;  // [1, Mh*Mw, hd/2]
  };

  // The tables of window w: the plain ones (cached per window), or, while a training step has
  // handed over its seed and the options ask for augmentation, that step's (kept for its
  // backward): the coordinates moved by the step's draw (integer_axis) before the policy's scale.
  const Tables& tables(Grid w) {
    if (augmentation_ && augments()) {
      if (!augmented_ || augmented_->window != w) {
        const CoordinateDraw d = aug_.draw(*augmentation_);
        const AxisAffine ax = integer_axis(d, false, w.cols), ay = integer_axis(d, true, w.rows);
        RopeAxialLayout l = layout(w);
        l.offset_x = ax.b * l.scale_x;
        l.offset_y = ay.b * l.scale_y;
        l.scale_x *= ax.a;
        l.scale_y *= ay.a;
        augmented_ = Tables{w, {}, {}};
        rope_axial_tables(augmented_->cos, augmented_->sin, w, hd_, l);
      }
      return *augmented_;
    }
    for (const Tables& t : cache_)
      if (t.window == w) return t;
    Tables t{w, {}, {}};
    rope_axial_tables(t.cos, t.sin, w, hd_, layout(w));
    cache_.push_back(std::move(t));
    return cache_.back();
  }

  // The angles' layout on window w. The built window W0 has the coordinate scale s0 = ref / W0
  // (1 without a reference); interpolate scales window w's coordinates by s0 W0 / w (= ref / w:
  // every window spans the built range), extrapolate keeps s0 (coordinates run past the range),
  // ntk keeps s0 and scales pair k of each axis by ntk_scale(k, hd/4, w / W0).
  RopeAxialLayout layout(Grid w) const {
    RopeAxialLayout l{theta_, x_first_, 1.0, 1.0};
    const double s0x = ref_.rows > 0 ? static_cast<double>(ref_.cols) / window_.cols : 1.0;
    const double s0y = ref_.rows > 0 ? static_cast<double>(ref_.rows) / window_.rows : 1.0;
    if (extension_rule() == ExtensionRule::interpolate) {
      l.scale_x = s0x * static_cast<double>(window_.cols) / static_cast<double>(w.cols);
      l.scale_y = s0y * static_cast<double>(window_.rows) / static_cast<double>(w.rows);
    } else {
      l.scale_x = s0x;
      l.scale_y = s0y;
    }
    if (extension_rule() == ExtensionRule::ntk) {
      l.ntk_x = static_cast<double>(w.cols) / static_cast<double>(window_.cols);
      l.ntk_y = static_cast<double>(w.rows) / static_cast<double>(window_.rows);
    }
    return l;
  }

  int64_t heads_, hd_;
  double theta_;
  bool x_first_;
  Grid window_, ref_;
  CoordinateAugmentation aug_;
  std::deque<Tables> cache_;  // one entry per window seen; a deque keeps references valid
  std::optional<Tables> augmented_;  // the current training step's
};

}  // namespace

KindDef rope_axial_kind() {
  KindDef k;
  k.name = "rope-axial";
  k.site = Site::attention;
  k.options = {
      {"theta",
       "100",
       "base: theta_k = theta^(-4k/hd); grid: scaled to the built window (the slowest turns a "
       "quarter across its longer side)",
       {},
       false,
       false,
       false,
       true},
      {"indexing",
       "xy",
       "xy: x turns the first half of the pairs; ij: y (timm's names)",
       {"xy", "ij"}},
      {"ref", "none", "coordinates scaled to this grid (timm's ref_feat_shape)", {}, true}};
  for (OptionDef& d : coordinate_augmentation_options(" half-windows, about the centre"))
    k.options.push_back(std::move(d));
  k.summary = "RoPE-ViT axial: half the pairs rotate with x, half with y; fixed; hd % 4 == 0";
  k.extension = ExtensionRule::extrapolate;
  k.extension_note =
      "integer coordinates run past the trained range (the same frequencies); with ref=RxC the "
      "coordinates are rescaled to that grid instead (interpolate); the policy interpolate "
      "rescales them into the built range (y R0/R, x C0/C, as ref_feat_shape), extrapolate keeps "
      "the built window's scale; ntk: pair k of hd/4 per axis scales its coordinate by "
      "s^(-k/(hd/4-1))";
  k.make_attention = [](const Options& o, int64_t heads, int64_t head_dim, Grid window, int64_t,
                        Rng&) {
    const double theta = o.str("theta") == "grid"
                             ? grid_scaled_base(head_dim / 4, std::max(window.rows, window.cols))
                             : o.number("theta");
    return std::make_unique<RopeAxial>(heads, head_dim, window, theta,
                                       o.str("indexing") == "xy", o.grid("ref"),
                                       coordinate_augmentation(o));
  };
  return k;
}

}  // namespace vitpe::enc
