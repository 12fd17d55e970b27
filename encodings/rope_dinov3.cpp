// `rope-dinov3`: DINOv3's rotary embedding (Siméoni et al. 2025; timm's RotaryEmbeddingDinoV3,
// Eva rope_type 'dinov3'), fixed and shared by all blocks and heads. The coordinates are not
// integers but normalised to [-1, 1] on every grid: a patch at row i of R rows has
//   y = 2 (i + 0.5) / Dy - 1,   Dy = R (normalize=separate), max(R, C) (max) or min(R, C) (min)
// and x likewise from its column. Channel pairs are halves (c, c + hd/2) of each head (timm's
// rotate_half), not neighbours: pair p < hd/4 turns by 2 pi y / period_k, pair hd/4 + k by
// 2 pi x / period_k (indexing=ij, timm's; xy swaps the axes), period_k = theta^(4k/hd) with
// theta = timm's rope_temperature (100 for DINOv3).
// Native extension: interpolate (every grid spans [-1, 1], as DINOv3 evaluates at any size). The
// policy extrapolate keeps the built grid's denominators instead (a larger grid's coordinates run
// past +1, as integer coordinates run past the trained range). head_dim % 4 == 0. Prefix tokens
// are not rotated. No parameters.
// Training augmentation (DINOv3's; timm's shift/jitter/rescale_coords; options shift=S,
// jitter=J, rescale=R): during a training step the normalised coordinates are shifted and scaled
// by that step's one random draw (EncodingPart::set_augmentation), the same in every block;
// evaluation uses the plain coordinates.
#include <cmath>
#include <deque>
#include <numbers>
#include <optional>
#include <vector>

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

enum class Normalize { separate, max, min };


class RopeDinov3 final : public RotationAttentionEncoding {
 public:
  RopeDinov3(int64_t heads, int64_t head_dim, Grid window, double theta, Normalize normalize,
             bool y_first, const CoordinateAugmentation& aug)
      : heads_(heads),
        hd_(head_dim),
        theta_(theta),
        normalize_(normalize),
        y_first_(y_first),
        window_(window),
        aug_(aug) {
    require(head_dim % 4 == 0, "rope-dinov3",
            "head_dim must be divisible by 4 (pairs split between y and x), got " +
                std::to_string(head_dim));
    check_grid("rope-dinov3", window);
  }

  std::string kind() const override { return "rope-dinov3"; }

  void rotate(Tensor& q_out, Tensor& k_out, const Tensor& q, const Tensor& k,
              const AttnGeometry& geom) override {
    check_qk("rope-dinov3", q, k, heads_, hd_, geom);
    const Tables& t = tables(geom.window);
    rope_rotate(q_out, q, t.cos, t.sin, geom.prefix, /*halves=*/true);
    rope_rotate(k_out, k, t.cos, t.sin, geom.prefix, /*halves=*/true);
  }

  void rotate_qkv_rows(Tensor& qkv, int64_t heads, const AttnGeometry& geom) override {
    check_grid("rope-dinov3", geom.window);
    const Tables& t = tables(geom.window);
    rope_rotate_qkv_rows(qkv, heads, t.cos, t.sin, geom.prefix, /*halves=*/true);
  }

  void rotate_backward(Tensor& dq, Tensor& dk, const Tensor& dq_out, const Tensor& dk_out,
                       const Tensor& q, const Tensor& k, const AttnGeometry& geom) override {
    check_qk("rope-dinov3", q, k, heads_, hd_, geom);
    const Tables& t = tables(geom.window);
    Tensor none;
    rope_rotate_backward(dq, none, dq_out, q, t.cos, t.sin, geom.prefix, true);
    rope_rotate_backward(dk, none, dk_out, k, t.cos, t.sin, geom.prefix, true);
  }

  // The angles per unit of integer coordinate on this window (the normalisation's scale; its
  // constant offset turns every patch alike and cancels between two rotated tokens), marked
  // approximate: the pairs are halves and the prefix tokens would see the offset.
  AttentionTerms terms(const AttnGeometry& geom) override {
    check_grid("rope-dinov3", geom.window);
    AttentionTerms t = AttentionEncoding::terms(geom);
    const auto [dy, dx] = denominators(geom.window);
    RopeAxialLayout l{theta_, !y_first_, 4 * std::numbers::pi / dx, 4 * std::numbers::pi / dy};
    t.rotation_freqs = rope_axial_freqs(heads_, hd_, l);
    t.rotation_approximate = true;
    return t;
  }

  std::vector<Param*> params() override { return {}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::interpolate);
  }
  bool augments() const override { return aug_.any(); }

 protected:
  void policy_changed() override { cache_.clear(); }
  void augmentation_changed() override { augmented_.reset(); }

 private:
  struct Tables {
    Grid window;
    Tensor cos, sin;  // [1, Mh*Mw, hd/2]: entry p the angle of channels (p, p + hd/2)
  };

  // The denominators on window w: from w itself (interpolate) or from the built window
  // (extrapolate), per axis or the longer/shorter side's.
  std::pair<float, float> denominators(Grid w) const {
    const Grid d = extension_rule() == ExtensionRule::interpolate ? w : window_;
    float dy = static_cast<float>(d.rows), dx = static_cast<float>(d.cols);
    if (normalize_ == Normalize::max) dy = dx = std::max(dy, dx);
    if (normalize_ == Normalize::min) dy = dx = std::min(dy, dx);
    return {dy, dx};
  }
  // Patch index i -> 2 (i + 0.5) / D - 1, in float32 in timm's order of operations, so that the
  // tables are timm's to the last bit.
  static float coordinate(int64_t i, float denominator) {
    return 2.0f * ((static_cast<float>(i) + 0.5f) / denominator) - 1.0f;
  }

  // The tables of window w: the plain ones (cached per window), or, while a training step has
  // handed over its seed and the options ask for augmentation, that step's (kept for its
  // backward).
  const Tables& tables(Grid w) {
    if (augmentation_ && augments()) {
      if (!augmented_ || augmented_->window != w) augmented_ = compute(w, aug_.draw(*augmentation_));
      return *augmented_;
    }
    for (const Tables& t : cache_)
      if (t.window == w) return t;
    cache_.push_back(compute(w, CoordinateDraw{}));
    return cache_.back();
  }

  // The tables of window w with the coordinates moved by draw d (none: CoordinateDraw{}).
  Tables compute(Grid w, const CoordinateDraw& d) const {
    const int64_t half = hd_ / 2, quarter = hd_ / 4;
    Tables t{w, Tensor::empty({1, w.count(), half}), Tensor::empty({1, w.count(), half})};
    const auto [dy, dx] = denominators(w);
    const float two_pi = 2.0f * std::numbers::pi_v<float>;
    std::vector<float> period(static_cast<size_t>(quarter));  // theta^(4k/hd), as timm's float32
    for (int64_t k = 0; k < quarter; ++k) {
      period[static_cast<size_t>(k)] = std::pow(
          static_cast<float>(theta_), 2.0f * static_cast<float>(k) / static_cast<float>(half));
    }
    for (int64_t n = 0; n < w.count(); ++n) {
      const float y = ((coordinate(n / w.cols, dy) + d.shift_y) * d.jitter_y) * d.rescale;
      const float x = ((coordinate(n % w.cols, dx) + d.shift_x) * d.jitter_x) * d.rescale;
      const float first = y_first_ ? y : x, second = y_first_ ? x : y;
      for (int64_t p = 0; p < half; ++p) {
        const float period_p = period[static_cast<size_t>(p % quarter)];
        const float a = two_pi * (p < quarter ? first : second) / period_p;
        t.cos.f32()[n * half + p] = std::cos(a);
        t.sin.f32()[n * half + p] = std::sin(a);
      }
    }
    return t;
  }

  int64_t heads_, hd_;
  double theta_;
  Normalize normalize_;
  bool y_first_;
  Grid window_;
  CoordinateAugmentation aug_;
  std::deque<Tables> cache_;         // one entry per window seen; a deque keeps references valid
  std::optional<Tables> augmented_;  // the current training step's
};

Normalize parse_normalize(const std::string& s) {
  return s == "max" ? Normalize::max : s == "min" ? Normalize::min : Normalize::separate;
}

}  // namespace

KindDef rope_dinov3_kind() {
  KindDef k;
  k.name = "rope-dinov3";
  k.site = Site::attention;
  k.options = {
      {"theta", "100", "period_k = theta^(4k/hd) (timm's rope_temperature)", {}},
      {"normalize",
       "separate",
       "coordinates over each axis' own length (separate), or the longer/shorter side's",
       {"separate", "max", "min"}},
      {"indexing", "ij", "ij: y turns the first half of the pairs (timm's); xy: x", {"ij", "xy"}}};
  for (OptionDef& d : coordinate_augmentation_options("")) k.options.push_back(std::move(d));
  k.summary =
      "DINOv3's RoPE: coordinates normalised to [-1, 1] per axis, channels rotated in halves; "
      "fixed; hd % 4 == 0";
  k.extension = ExtensionRule::interpolate;
  k.extension_note =
      "every grid spans [-1, 1] (the normalisation is the interpolation); the policy "
      "extrapolate keeps the built grid's denominators, so a larger grid runs past +1";
  // Not in the default comparison: a timm family's encoding, compared when asked for.
  k.studied_global = k.studied_windowed = false;
  k.make_attention = [](const Options& o, int64_t heads, int64_t head_dim, Grid window, int64_t,
                        Rng&) {
    const CoordinateAugmentation aug = coordinate_augmentation(o);
    return std::make_unique<RopeDinov3>(heads, head_dim, window, o.number("theta"),
                                        parse_normalize(o.str("normalize")),
                                        o.str("indexing") == "ij", aug);
  };
  return k;
}

}  // namespace vitpe::enc
