// `cpb`: Swin V2's continuous position bias, a small MLP per block from a relative offset to a
// bias per head (timm's swin_transformer_v2.WindowAttention, the bias term only: its cosine
// attention and logit_scale belong to the model).
//
// For the (2Mh-1)(2Mw-1) offsets (dy, dx) of an Mh x Mw window, dy in -(Mh-1)..Mh-1 and dx in
// -(Mw-1)..Mw-1, row-major over dy then dx (row r = (dy+Mh-1)(2Mw-1) + dx+Mw-1):
//   u = 8 * (dy / max(Rh-1, 1), dx / max(Rw-1, 1)),  c = sign(u) * log2(|u| + 1) / log2(8)
// with Rh x Rw the `ref` grid (timm's pretrained_window_size), or the current window with
// ref=none (pretrained_window_size=0); then
//   table[r, h] = 16 * sigmoid(W2 relu(W1 c + b1))[h],  bias[h, i, j] = table[idx(i, j), h]
// with relbias' index idx (ops/attention_terms.h relbias_index).
// Parameters (timm's names relative to the block): "attn.cpb_mlp.0.weight" W1 [hidden, 2],
// "attn.cpb_mlp.0.bias" b1 [hidden], "attn.cpb_mlp.2.weight" W2 [H, hidden] (no bias).
// Init as timm's SwinV2 _init_weights: weights trunc_normal_(std=.02) (bounds +-2 absolute: a
// plain normal(0, 0.02)), bias zero. No weight decay (timm's no_weight_decay lists cpb_mlp).
// Prefix tokens: learned kind, as BEiT's relbias entries. Built with prefix > 0 a parameter
// "attn.cpb_prefix_bias" [3, H] (init zero, no weight decay) is added to the logits as it is (no
// sigmoid): row 0 for (prefix query -> grid key), row 1 for (grid query -> prefix key), row 2 for
// (prefix -> prefix); terms() appends them to the table as its last three rows.
// Another window: the MLP is continuous, so nothing is resampled; every call computes the table
// for its own window (cached per window until an optimizer step changes the parameters). With
// ref=none the offsets span [-8, 8] on every window (interpolation); with a ref grid they are
// scaled by it, so windows larger than ref extrapolate past the trained range.
// Backward: dbias is scatter-summed into dtable, then through 16*sigmoid, W2, relu, W1 and b1.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "encodings/kinds.h"

namespace vitpe::enc {

namespace {

Param make_param(const std::string& name, const Shape& shape) {
  Param p;
  p.name = name;
  p.value = Tensor::zeros(shape);
  p.grad = Tensor::zeros(shape);
  p.no_decay = true;
  return p;
}

class Cpb final : public BiasAttentionEncoding {
 public:
  Cpb(int64_t heads, int64_t hidden, Grid ref, Grid window, int64_t prefix, Rng& rng)
      : heads_(heads), hidden_(hidden), ref_(ref), window_(window), extra_(prefix > 0 ? 3 : 0) {
    require(heads >= 1, "cpb", "heads must be >= 1, got " + std::to_string(heads));
    check_grid("cpb", window);
    w1_ = make_param("attn.cpb_mlp.0.weight", {hidden, 2});
    b1_ = make_param("attn.cpb_mlp.0.bias", {hidden});
    w2_ = make_param("attn.cpb_mlp.2.weight", {heads, hidden});
    // = timm's trunc_normal_(std=.02): bounds +-2 are 100 std
    rng.fill_normal(w1_.value, 0.02);
    rng.fill_normal(w2_.value, 0.02);
    if (extra_ > 0) prefix_ = make_param("attn.cpb_prefix_bias", {3, heads});
  }

  std::string kind() const override { return "cpb"; }

  // The table [L (+3 with prefix tokens), H] for the geometry's window.
  AttentionTerms terms(const AttnGeometry& geom) override {
    check(geom);
    AttentionTerms t = AttentionEncoding::terms(geom);
    const Tensor& table = table_for(geom.window);
    t.relative_table = geom.prefix > 0 ? table : table.slice(0, main_rows(geom.window));
    return t;
  }

  // bias: [H, N, N], N = prefix + Mh*Mw
  void bias(Tensor& bias, const AttnGeometry& geom) override {
    check_shape("cpb bias", "bias", bias, {heads_, geom.tokens(), geom.tokens()});
    attention_terms_bias(bias, terms(geom));
  }

  // dbias: [H, N, N] -> gradients of W1, b1, W2 (and the prefix rows)
  void bias_backward(const Tensor& dbias, const AttnGeometry& geom) override {
    check(geom);
    check_shape("cpb bias_backward", "dbias", dbias, {heads_, geom.tokens(), geom.tokens()});
    const int64_t L = main_rows(geom.window), rows = L + (geom.prefix > 0 ? 3 : 0);
    const std::vector<double> dtable = scatter(dbias, geom, rows);  // [rows, H]
    mlp_backward(dtable.data(), geom.window);
    if (geom.prefix == 0) return;
    float* gp = prefix_.grad.f32();
    for (int64_t i = 0; i < 3 * heads_; ++i) gp[i] += static_cast<float>(dtable[L * heads_ + i]);
  }

  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_,
                        ref_.rows > 0 ? ExtensionRule::extrapolate : ExtensionRule::interpolate);
  }

 protected:
  void policy_changed() override { cache_.clear(); }

 public:
  // The MLP takes any window: only the window is checked.
  void resample(Grid new_window) override { check_grid("cpb", new_window); }

  std::vector<Param*> params() override {
    if (extra_ > 0) return {&w1_, &b1_, &w2_, &prefix_};
    return {&w1_, &b1_, &w2_};
  }

 private:
  static int64_t main_rows(Grid w) { return (2 * w.rows - 1) * (2 * w.cols - 1); }

  void check(const AttnGeometry& geom) const {
    check_grid("cpb", geom.window);
    require(geom.prefix == 0 || extra_ > 0, "cpb",
            "built without prefix tokens (no prefix entries), but asked for " +
                std::to_string(geom.prefix) + " prefix tokens");
  }

  // The MLP's input for row r of a window's table: (dy, dx) scaled and log-spaced. The built
  // window W0 scales offsets by 1 / (B - 1), B = ref or W0; interpolate scales window w's by
  // (W0 - 1) / ((B - 1)(w - 1)) (= 1 / (w - 1) without ref: every window spans [-8, 8]),
  // extrapolate keeps 1 / (B - 1).
  std::array<double, 2> coords(Grid w, int64_t r) const {
    const Grid base = ref_.rows > 0 ? ref_ : window_;
    auto span = [](int64_t n) { return static_cast<double>(std::max<int64_t>(n - 1, 1)); };
    const bool interp = extension_rule() == ExtensionRule::interpolate;
    const double sy =
        interp ? span(window_.rows) / (span(base.rows) * span(w.rows)) : 1.0 / span(base.rows);
    const double sx =
        interp ? span(window_.cols) / (span(base.cols) * span(w.cols)) : 1.0 / span(base.cols);
    const int64_t dy = r / (2 * w.cols - 1) - (w.rows - 1);
    const int64_t dx = r % (2 * w.cols - 1) - (w.cols - 1);
    auto log_spaced = [](double u) {
      return (u > 0 ? 1.0 : (u < 0 ? -1.0 : 0.0)) * std::log2(std::fabs(u) + 1.0) / 3.0;
    };
    return {log_spaced(8.0 * static_cast<double>(dy) * sy),
            log_spaced(8.0 * static_cast<double>(dx) * sx)};
  }

  // a: [hidden] = W1 c + b1 (before the relu)
  void hidden_pre(const std::array<double, 2>& c, std::vector<double>& a) const {
    const float* w1 = w1_.value.f32();
    const float* b1 = b1_.value.f32();
    for (int64_t k = 0; k < hidden_; ++k) a[k] = w1[2 * k] * c[0] + w1[2 * k + 1] * c[1] + b1[k];
  }

  // [L + extra, H]: 16 * sigmoid(MLP) for the window's offsets, then the prefix rows.
  Tensor compute_table(Grid w) const {
    const int64_t L = main_rows(w);
    Tensor t = Tensor::empty({L + extra_, heads_});
    const float* w2 = w2_.value.f32();
    std::vector<double> a(hidden_);
    for (int64_t r = 0; r < L; ++r) {
      hidden_pre(coords(w, r), a);
      for (int64_t h = 0; h < heads_; ++h) {
        double pre = 0;
        for (int64_t k = 0; k < hidden_; ++k) pre += w2[h * hidden_ + k] * std::max(a[k], 0.0);
        t.f32()[r * heads_ + h] = static_cast<float>(16.0 / (1.0 + std::exp(-pre)));
      }
    }
    if (extra_ > 0) std::copy_n(prefix_.value.f32(), 3 * heads_, t.f32() + L * heads_);
    return t;
  }

  const Tensor& table_for(Grid w) {
    std::vector<const Tensor*> sources = {&w1_.value, &b1_.value, &w2_.value};
    if (extra_ > 0) sources.push_back(&prefix_.value);
    return cache_.get(w, sources, [&] { return compute_table(w); });
  }

  // dbias [H, N, N] -> dtable [rows, H]: the sum over the pairs that share a row.
  std::vector<double> scatter(const Tensor& dbias, const AttnGeometry& geom, int64_t rows) const {
    const int64_t N = geom.tokens();
    AttnBiasArgs a;
    a.N = static_cast<int>(N);
    a.prefix = static_cast<int>(geom.prefix);
    a.Mh = static_cast<int>(geom.window.rows);
    a.Mw = static_cast<int>(geom.window.cols);
    a.table_rows = static_cast<int>(rows);
    std::vector<double> g(rows * heads_, 0.0);
    for (int64_t h = 0; h < heads_; ++h) {
      const float* d = dbias.f32() + h * N * N;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j)
          g[relative_index(a, static_cast<int>(i), static_cast<int>(j)) * heads_ + h] +=
              d[i * N + j];
    }
    return g;
  }

  // dtable: the main rows [L, H] of a window's table -> gradients of W1, b1, W2 (recomputing
  // the forward of each row).
  void mlp_backward(const double* dtable, Grid w) {
    const int64_t L = main_rows(w);
    const float* w2 = w2_.value.f32();
    std::vector<double> a(hidden_), dz(hidden_), dpre(heads_);
    std::vector<double> gw1(2 * hidden_, 0.0), gb1(hidden_, 0.0), gw2(heads_ * hidden_, 0.0);
    for (int64_t r = 0; r < L; ++r) {
      const std::array<double, 2> c = coords(w, r);
      hidden_pre(c, a);
      for (int64_t h = 0; h < heads_; ++h) {
        double pre = 0;
        for (int64_t k = 0; k < hidden_; ++k) pre += w2[h * hidden_ + k] * std::max(a[k], 0.0);
        const double s = 1.0 / (1.0 + std::exp(-pre));
        dpre[h] = dtable[r * heads_ + h] * 16.0 * s * (1.0 - s);
      }
      std::fill(dz.begin(), dz.end(), 0.0);
      for (int64_t h = 0; h < heads_; ++h) {
        if (dpre[h] == 0.0) continue;
        for (int64_t k = 0; k < hidden_; ++k) {
          gw2[h * hidden_ + k] += dpre[h] * std::max(a[k], 0.0);
          dz[k] += dpre[h] * w2[h * hidden_ + k];
        }
      }
      for (int64_t k = 0; k < hidden_; ++k) {
        if (!(a[k] > 0.0)) continue;  // relu'(0) = 0, as PyTorch
        gw1[2 * k] += dz[k] * c[0];
        gw1[2 * k + 1] += dz[k] * c[1];
        gb1[k] += dz[k];
      }
    }
    auto add = [](Tensor& grad, const std::vector<double>& g) {
      float* p = grad.f32();
      for (size_t i = 0; i < g.size(); ++i) p[i] += static_cast<float>(g[i]);
    };
    add(w1_.grad, gw1);
    add(b1_.grad, gb1);
    add(w2_.grad, gw2);
  }

  int64_t heads_, hidden_;
  Grid ref_;     // {0, 0}: none
  Grid window_;  // the built window
  int64_t extra_;
  Param w1_, b1_, w2_, prefix_;
  DerivedCache cache_;
};

}  // namespace

KindDef cpb_kind() {
  KindDef k;
  k.name = "cpb";
  k.site = Site::attention;
  k.options = {{"hidden", "512", "width of the MLP's hidden layer", {}},
               {"ref",
                "none",
                "grid the offsets are scaled by (Swin V2's pretrained window); none: the window",
                {},
                true}};
  k.summary =
      "bias 16*sigmoid(MLP(log-spaced relative offset)) per block (Swin V2 continuous position "
      "bias; learned class entries)";
  k.extension = ExtensionRule::interpolate;
  k.extension_note =
      "the MLP is evaluated at the new window's offsets: with ref=none they are rescaled to the "
      "same [-8, 8] range (interpolation); with ref=RxC larger windows extrapolate past it; "
      "the policies: interpolate rescales any window into the built range, extrapolate keeps "
      "the built window's scale";
  // Left out of the default studies, so that their results stay comparable with earlier runs.
  k.studied_global = false;
  k.studied_windowed = false;
  k.make_attention = [](const Options& o, int64_t heads, int64_t, Grid window, int64_t prefix,
                        Rng& rng) {
    const double hidden = o.number("hidden");
    require(hidden == std::floor(hidden) && hidden <= 65536, "cpb",
            "option hidden=" + o.str("hidden") + " must be a whole number from 1 to 65536");
    return std::make_unique<Cpb>(heads, static_cast<int64_t>(hidden), o.grid("ref"), window, prefix,
                                 rng);
  };
  return k;
}

}  // namespace vitpe::enc
