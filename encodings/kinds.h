// Internal to encodings/: the registry entry each kind file provides (name, site, options,
// makers), the validated options a maker receives, and shared building blocks:
// - TableTokenEncoding: token encodings that add a table [prefix + rows*cols, D];
// - rope_rotate / rope_rotate_backward: the RoPE kernels the rope kinds use.
// The factory (factory.cpp) lists the kinds explicitly (no static self-registration, which a
// static library would silently drop).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "encodings/encoding.h"

namespace vitpe::enc {

// One option of a kind: a positive number (`choices` empty, `grid` and `count` false; with
// `or_none` also "none"), one of `choices`, with `grid` set a grid "RxC" / "N" (N x N) or "none",
// with `count` set a whole number >= 0 (a block index).
struct OptionDef {
  std::string name, default_value, help;
  std::vector<std::string> choices;
  bool grid = false;
  bool count = false;
  bool or_none = false;
  // A positive number, or "grid": a base scaled to the built grid (grid_scaled_base).
  bool or_grid = false;
};

// DINOv3's training-time coordinate augmentation (timm's shift_coords, jitter_coords,
// rescale_coords; options shift=S, jitter=J, rescale=R of the rotary kinds), nullopt: off. One
// training step's draw, in timm's order: a shift per axis uniform in [-S, S], a jitter factor per
// axis and one rescale factor shared by both, each log-uniform in [1/f, f]; centred coordinates
// c (DINOv3's [-1, 1]) become ((c + shift) * jitter) * rescale. A pure function of the seed.
struct CoordinateDraw {
  float shift_y = 0, shift_x = 0, jitter_y = 1, jitter_x = 1, rescale = 1;
};
struct CoordinateAugmentation {
  std::optional<double> shift, jitter, rescale;
  bool any() const { return shift || jitter || rescale; }
  CoordinateDraw draw(uint64_t seed) const;
};
// Validated options with every default filled in.
class Options {
 public:
  Options(std::string kind, std::map<std::string, std::string> values)
      : kind_(std::move(kind)), values_(std::move(values)) {}
  const std::string& str(const std::string& name) const;
  double number(const std::string& name) const;
  // An or_none number option's value; nullopt for "none".
  std::optional<double> number_or_none(const std::string& name) const;
  // A grid option's value; {0, 0} for "none".
  Grid grid(const std::string& name) const;

 private:
  std::string kind_;
  std::map<std::string, std::string> values_;
};

// A draw on integer coordinates (the rotary kinds with patch indices): along an axis of `n`
// cells the index i becomes a * i + b, DINOv3's ((c + shift) jitter) rescale about the axis's
// centre (n - 1) / 2 with a shift of 1 moving n / 2 cells (DINOv3's [-1, 1] spans the axis).
struct AxisAffine {
  double a = 1, b = 0;
};
AxisAffine integer_axis(const CoordinateDraw& d, bool rows, int64_t n);

// The three options (shift, jitter, rescale) of CoordinateAugmentation, `units` saying what a
// shift of 1 moves, and their values.
std::vector<OptionDef> coordinate_augmentation_options(const std::string& units);
CoordinateAugmentation coordinate_augmentation(const Options& o);

using Site = EncodingSite;  // the public enum, spelt shorter inside the kinds

struct KindDef {
  std::string name;
  Site site = Site::none;
  std::vector<OptionDef> options;
  std::string summary;
  ExtensionRule extension = ExtensionRule::none;
  std::string extension_note;
  // In the default comparison of global-attention (ViT) and windowed (Swin) models.
  bool studied_global = true, studied_windowed = true;
  // Set for Site::token.
  std::function<std::unique_ptr<TokenEncoding>(const Options&, int64_t dim, Grid grid,
                                               int64_t prefix, Rng& rng)>
      make_token;
  // Set for Site::attention.
  std::function<std::unique_ptr<AttentionEncoding>(const Options&, int64_t heads, int64_t head_dim,
                                                   Grid window, int64_t prefix, Rng& rng)>
      make_attention;
  // Set for Site::conditional.
  std::function<std::unique_ptr<ConditionalEncoding>(const Options&, int64_t dim, Grid grid,
                                                     int64_t prefix, Rng& rng)>
      make_conditional;
};

KindDef none_kind();
KindDef learned1d_kind();
KindDef sincos1d_kind();
KindDef separable2d_kind();
KindDef sincos2d_kind();
KindDef relbias_kind();
KindDef rope_axial_kind();
KindDef rope_mixed_kind();
KindDef rope_dinov3_kind();
KindDef alibi2d_kind();
KindDef cpb_kind();
KindDef peg_kind();

// Throws std::invalid_argument("<kind>: <what>") when cond is false.
void require(bool cond, const std::string& kind, const std::string& what);
void check_grid(const std::string& kind, Grid grid);
// "RxC" or "N" (N x N) with 1 <= R, C <= 4096 -> the grid; "none" -> {0, 0}; anything else ->
// std::nullopt.
std::optional<Grid> parse_grid_value(const std::string& value);

// Attention kinds that only add a bias: no rotation (q and k pass through unchanged).
class BiasAttentionEncoding : public AttentionEncoding {
 public:
  bool has_bias() const override { return true; }
  bool has_rotation() const override { return false; }
  void rotate(Tensor& q_out, Tensor& k_out, const Tensor& q, const Tensor& k,
              const AttnGeometry&) override {
    q_out.copy_from(q);
    k_out.copy_from(k);
  }
  void rotate_backward(Tensor& dq, Tensor& dk, const Tensor& dq_out, const Tensor& dk_out,
                       const Tensor&, const Tensor&, const AttnGeometry&) override {
    float* gq = dq.f32();
    float* gk = dk.f32();
    const float* oq = dq_out.f32();
    const float* ok = dk_out.f32();
    for (int64_t i = 0; i < dq.numel(); ++i) gq[i] += oq[i];
    for (int64_t i = 0; i < dk.numel(); ++i) gk[i] += ok[i];
  }
};

// Attention kinds that only rotate q and k: their bias is zero and has no parameters.
class RotationAttentionEncoding : public AttentionEncoding {
 public:
  bool has_bias() const override { return false; }
  bool has_rotation() const override { return true; }
  void bias(Tensor& bias, const AttnGeometry&) override { bias.zero(); }
  void bias_backward(const Tensor&, const AttnGeometry&) override {}
};

// A token encoding that adds a table [prefix + grid.count(), D] to every sequence of the
// batch. Subclasses provide the table for a grid and, for learned kinds, its backward.
class TableTokenEncoding : public TokenEncoding {
 public:
  TableTokenEncoding(std::string kind, int64_t dim, Grid grid, int64_t prefix);

  std::string kind() const override { return kind_; }
  // Fixed tables are computed for any grid, so only the grid changes; learned kinds override.
  void resample(Grid new_grid) override;
  // tokens: [B, prefix + grid.count(), D] += table(grid)
  void forward(Tensor& tokens, Grid grid) override;
  // dtokens: [B, prefix + grid.count(), D] -> parameter gradients (sum over the batch)
  void backward(const Tensor& dtokens, Grid grid) override;
  Grid grid() const override { return grid_; }
  Tensor table(Grid grid) override { return table_ref(grid).clone(); }

 protected:
  // The table [prefix + grid.count(), D] for a grid; a reference valid until the next call.
  virtual const Tensor& table_ref(Grid grid) = 0;
  // dtable: [prefix + grid.count(), D] -> parameter gradients. Fixed kinds do nothing.
  virtual void table_backward(const Tensor& dtable, Grid grid) {}

  std::string kind_;
  int64_t dim_, prefix_;
  Grid grid_;

 private:
  void check_tokens(const char* op, const Tensor& t, Grid grid) const;
  Tensor dtable_;  // scratch for backward
};

// A table derived from learned values for another grid, recomputed only when the grid or the
// learned values change (the source values are kept to notice optimizer steps).
class DerivedCache {
 public:
  // Returns the cached value for `grid` if `sources` are unchanged, else recomputes it.
  const Tensor& get(Grid grid, const std::vector<const Tensor*>& sources,
                    const std::function<Tensor()>& compute);
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    Grid grid;
    std::vector<Tensor> snapshot;
    Tensor value;
  };
  std::vector<Entry> entries_;
};

// Patch coordinates of token t (0-based, after the prefix) in a grid with `cols` columns.
inline int64_t patch_row(int64_t t, int64_t cols) { return t / cols; }
inline int64_t patch_col(int64_t t, int64_t cols) { return t % cols; }

// A table [P+N, D] as per-channel planes [D, rows, cols] of its patch rows and back.
Tensor patch_rows_to_planes(const Tensor& table, int64_t prefix, Grid grid);
void planes_to_patch_rows(const Tensor& planes, Tensor& table, int64_t prefix, Grid grid,
                          bool accumulate);

// RoPE on pairs of channels of each head: (2p, 2p+1), or with `halves` (p, p + hd/2) (timm's
// rotate_half layout, DINOv3's). cos/sin: [Hc, Nw, hd/2], entry p the angle of pair p, for the
// window's tokens, Hc = 1 (shared by heads) or H. x, out: [B, H, prefix + Nw, hd]; prefix tokens
// are copied.
void rope_rotate(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t prefix,
                 bool halves = false);
// The same rotation in place on q and k inside qkv projection rows [B, prefix + Nw, 3 D]
// (AttentionEncoding::rotate_qkv_rows), for `heads` heads; prefix tokens and v untouched.
void rope_rotate_qkv_rows(Tensor& qkv, int64_t heads, const Tensor& cos, const Tensor& sin,
                          int64_t prefix, bool halves = false);
// dx += R^T dout. When dangle is defined ([Hc, Nw, hd/2]) it accumulates dL/d(angle), which needs
// the rotated output, recomputed from x.
void rope_rotate_backward(Tensor& dx, Tensor& dangle, const Tensor& dout, const Tensor& x,
                          const Tensor& cos, const Tensor& sin, int64_t prefix,
                          bool halves = false);
void check_qk(const std::string& kind, const Tensor& q, const Tensor& k, int64_t heads,
              int64_t head_dim, const AttnGeometry& geom);

}  // namespace vitpe::enc
