// `rope-mixed`: RoPE-ViT's mixed rotary embedding (Heo et al. 2024) with learned frequencies per
// block, head and channel pair: pair p of head h rotates by
//   angle = x * fx[h, p] + y * fy[h, p]      (x = column, y = row)
// Parameter: "attn.rope.freqs" [2, H, hd/2] = (fx, fy), no weight decay. timm keeps one tensor
// "rope.freqs" [2, depth, H, hd/2] for the model; ours is its slice [:, block] (timm's Eva with
// rope_type='mixed', grid_indexing='xy': t_x = column, interleaved pairs).
// Init as published (timm's init_random_2d_freqs): m_k = theta^(-4k/hd), k = 0..hd/4-1, theta
// option (default 10), a random phase phi per head, uniform in [0, 2 pi):
//   pairs k < hd/4:  (fx, fy) = m_k (cos phi, sin phi);  pairs hd/4 + k: m_k (-sin phi, cos phi).
// head_dim % 4 == 0. Prefix tokens: not rotated (class token as in RoPE-ViT; the learned part is
// the frequencies, which have no position of their own). Any window works; it keeps the
// interface's resample(), which only checks the window. Backward gives dq, dk and the frequency
// gradients (from q, k and dq_out, dk_out). Training augmentation as rope-axial's (DINOv3's
// shift, jitter and rescale of the patch indices, options shift=S, jitter=J, rescale=R).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

class RopeMixed final : public RotationAttentionEncoding {
 public:
  RopeMixed(int64_t heads, int64_t head_dim, Grid window, double theta,
            const CoordinateAugmentation& aug, Rng& rng)
      : heads_(heads), hd_(head_dim), window_(window), aug_(aug) {
    require(head_dim % 4 == 0, "rope-mixed",
            "head_dim must be divisible by 4 (two rotated halves of pairs), got " +
                std::to_string(head_dim));
    check_grid("rope-mixed", window);
    const int64_t half = hd_ / 2, quarter = hd_ / 4;
    param_.name = "attn.rope.freqs";
    param_.value = Tensor::empty({2, heads, half});
    param_.no_decay = true;
    float* fx = param_.value.f32();
    float* fy = fx + heads * half;
    for (int64_t h = 0; h < heads; ++h) {
      const double phi = rng.uniform() * 2.0 * std::numbers::pi;
      for (int64_t k = 0; k < quarter; ++k) {
        const double m = std::pow(theta, -4.0 * k / hd_);
        fx[h * half + k] = static_cast<float>(m * std::cos(phi));
        fy[h * half + k] = static_cast<float>(m * std::sin(phi));
        fx[h * half + quarter + k] = static_cast<float>(-m * std::sin(phi));
        fy[h * half + quarter + k] = static_cast<float>(m * std::cos(phi));
      }
    }
    param_.grad = Tensor::zeros(param_.value.shape());
  }

  std::string kind() const override { return "rope-mixed"; }

  // q, k: [B, H, N, hd] -> rotated copies
  void rotate(Tensor& q_out, Tensor& k_out, const Tensor& q, const Tensor& k,
              const AttnGeometry& geom) override {
    check_qk("rope-mixed", q, k, heads_, hd_, geom);
    compute_tables(geom.window);
    rope_rotate(q_out, q, cos_, sin_, geom.prefix);
    rope_rotate(k_out, k, cos_, sin_, geom.prefix);
  }

  void rotate_qkv_rows(Tensor& qkv, int64_t heads, const AttnGeometry& geom) override {
    check_grid("rope-mixed", geom.window);
    if (heads != heads_)
      throw ShapeError("rope-mixed: built for " + std::to_string(heads_) + " heads, asked for " +
                       std::to_string(heads));
    compute_tables(geom.window);
    rope_rotate_qkv_rows(qkv, heads, cos_, sin_, geom.prefix);
  }

  void rotate_backward(Tensor& dq, Tensor& dk, const Tensor& dq_out, const Tensor& dk_out,
                       const Tensor& q, const Tensor& k, const AttnGeometry& geom) override {
    check_qk("rope-mixed", q, k, heads_, hd_, geom);
    compute_tables(geom.window);
    const int64_t half = hd_ / 2, nw = geom.window.count();
    Tensor dangle = Tensor::zeros({heads_, nw, half});
    rope_rotate_backward(dq, dangle, dq_out, q, cos_, sin_, geom.prefix);
    rope_rotate_backward(dk, dangle, dk_out, k, cos_, sin_, geom.prefix);
    // angle = x fx + y fy  ->  dfx += x dangle, dfy += y dangle (summed over tokens)
    float* gx = param_.grad.f32();
    float* gy = gx + heads_ * half;
    const Scales sc = scales(geom.window);
    const auto [ax, ay] = moved(geom.window);
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t n = 0; n < nw; ++n) {
        const double col = ax.a * static_cast<double>(patch_col(n, geom.window.cols)) + ax.b;
        const double row = ay.a * static_cast<double>(patch_row(n, geom.window.cols)) + ay.b;
        const float* da = dangle.f32() + (h * nw + n) * half;
        for (int64_t p = 0; p < half; ++p) {
          gx[h * half + p] += static_cast<float>(col * sc.x[p]) * da[p];
          gy[h * half + p] += static_cast<float>(row * sc.y[p]) * da[p];
        }
      }
  }

  AttentionTerms terms(const AttnGeometry& geom) override {
    check_grid("rope-mixed", geom.window);
    AttentionTerms t = AttentionEncoding::terms(geom);
    t.rotation_freqs = rope_freqs_from_planes(param_.value);
    // The kernel turns integer coordinates: fold the coordinate scales into the frequencies.
    const Scales sc = scales(geom.window);
    const int64_t half = hd_ / 2;
    float* f = t.rotation_freqs.f32();
    for (int64_t i = 0; i < t.rotation_freqs.numel() / 2; ++i) {
      if (sc.x[i % half] != 1.0) f[2 * i] = static_cast<float>(f[2 * i] * sc.x[i % half]);
      if (sc.y[i % half] != 1.0) f[2 * i + 1] = static_cast<float>(f[2 * i + 1] * sc.y[i % half]);
    }
    return t;
  }

  std::vector<Param*> params() override { return {&param_}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::extrapolate, {.frequencies = true});
  }

  bool augments() const override { return aug_.any(); }

 protected:
  void policy_changed() override { tables_valid_ = false; }
  void augmentation_changed() override { tables_valid_ = false; }

 private:
  // Coordinate scales of each pair p on window w, per axis: 1 (extrapolate, integer
  // coordinates), the built window over w (interpolate: w spans the built range), or ntk's
  // ntk_scale(k, hd/4, w / built) for the pair's place k = p mod hd/4 on the ladder it was
  // initialised with (m_k = theta^(-4k/hd); a constant of the pair, so the gradients stay exact).
  struct Scales {
    std::vector<double> x, y;  // [hd/2]
  };
  Scales scales(Grid w) const {
    const int64_t half = hd_ / 2, quarter = hd_ / 4;
    Scales s{std::vector<double>(half, 1.0), std::vector<double>(half, 1.0)};
    const double rx = static_cast<double>(w.cols) / static_cast<double>(window_.cols);
    const double ry = static_cast<double>(w.rows) / static_cast<double>(window_.rows);
    const ExtensionRule rule = extension_rule();
    for (int64_t p = 0; p < half; ++p) {
      if (rule == ExtensionRule::interpolate) {
        s.x[p] = static_cast<double>(window_.cols) / static_cast<double>(w.cols);
        s.y[p] = static_cast<double>(window_.rows) / static_cast<double>(w.rows);
      } else if (rule == ExtensionRule::ntk) {
        s.x[p] = ntk_scale(p % quarter, quarter, rx);
        s.y[p] = ntk_scale(p % quarter, quarter, ry);
      }
    }
    return s;
  }

  // The patch indices' map on window w per axis (column, row): a training step's coordinate
  // augmentation (kinds.h integer_axis) while its seed is handed over, else the identity.
  std::pair<AxisAffine, AxisAffine> moved(Grid w) const {
    if (!augmentation_ || !augments()) return {};
    const CoordinateDraw d = aug_.draw(*augmentation_);
    return {integer_axis(d, false, w.cols), integer_axis(d, true, w.rows)};
  }

  // cos_/sin_: [H, Mh*Mw, hd/2] from the current frequencies, computed again only when the
  // window, the policy or the frequencies changed (training changes them every step; inference
  // never, where a ViT-S at 224 px would otherwise spend 2 x 12 x 6 x 196 x 32 sines and cosines
  // per image).
  void compute_tables(Grid w) {
    const int64_t half = hd_ / 2;
    const Shape s{heads_, w.count(), half};
    const size_t freq_bytes = param_.value.nbytes();
    if (tables_valid_ && tables_window_ == w && cos_.defined() && cos_.shape() == s &&
        tables_freqs_.size() * sizeof(float) == freq_bytes &&
        std::memcmp(tables_freqs_.data(), param_.value.f32(), freq_bytes) == 0) {
      return;
    }
    if (!cos_.defined() || cos_.shape() != s) {
      cos_ = Tensor::empty(s);
      sin_ = Tensor::empty(s);
    }
    tables_window_ = w;
    tables_freqs_.assign(param_.value.f32(), param_.value.f32() + param_.value.numel());
    tables_valid_ = true;
    const float* fx = param_.value.f32();
    const float* fy = fx + heads_ * half;
    const Scales sc = scales(w);
    const auto [ax, ay] = moved(w);
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t n = 0; n < w.count(); ++n) {
        const double col = ax.a * static_cast<double>(patch_col(n, w.cols)) + ax.b;
        const double row = ay.a * static_cast<double>(patch_row(n, w.cols)) + ay.b;
        for (int64_t p = 0; p < half; ++p) {
          double a = col * sc.x[p] * fx[h * half + p] + row * sc.y[p] * fy[h * half + p];
          cos_.f32()[(h * w.count() + n) * half + p] = static_cast<float>(std::cos(a));
          sin_.f32()[(h * w.count() + n) * half + p] = static_cast<float>(std::sin(a));
        }
      }
  }

  int64_t heads_, hd_;
  Grid window_;  // the built window
  CoordinateAugmentation aug_;
  Param param_;
  Tensor cos_, sin_;
  // What cos_/sin_ were computed for (compute_tables).
  Grid tables_window_;
  std::vector<float> tables_freqs_;
  bool tables_valid_ = false;
};

}  // namespace

KindDef rope_mixed_kind() {
  KindDef k;
  k.name = "rope-mixed";
  k.site = Site::attention;
  k.options = {{"theta",
                "10",
                "init base: m_k = theta^(-4k/hd); grid: scaled to the built window (the slowest "
                "turns a quarter across its longer side)",
                {},
                false,
                false,
                false,
                true}};
  for (OptionDef& d : coordinate_augmentation_options(" half-windows, about the centre"))
    k.options.push_back(std::move(d));
  k.summary = "RoPE-ViT mixed: learned (fx, fy) per block/head/pair; hd % 4 == 0";
  k.extension = ExtensionRule::extrapolate;
  k.extension_note =
      "integer coordinates run past the trained range (the learned frequencies); interpolate: "
      "coordinates (y R0/R, x C0/C) in the built range; ntk: pair k of hd/4 (its place on the "
      "initial ladder) scales its coordinates by s^(-k/(hd/4-1)) per axis";
  k.make_attention = [](const Options& o, int64_t heads, int64_t head_dim, Grid window, int64_t,
                        Rng& rng) {
    const double theta = o.str("theta") == "grid"
                             ? grid_scaled_base(head_dim / 4, std::max(window.rows, window.cols))
                             : o.number("theta");
    return std::make_unique<RopeMixed>(heads, head_dim, window, theta,
                                       coordinate_augmentation(o), rng);
  };
  return k;
}

}  // namespace vitpe::enc
