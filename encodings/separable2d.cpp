// `separable2d`: learned row and column tables (the ViT paper's "2-D" embedding).
//   mode=sum    (default): PE(r, c) = row[r] + col[c], both tables D wide.
//   mode=concat: PE(r, c) = [row[r] | col[c]], each table D/2 wide (the ViT paper's variant).
// Parameters: "pos_embed_row" [rows, Dr], "pos_embed_col" [cols, Dc] and, when prefix > 0,
// "pos_embed_prefix" [prefix, D]; initialised as timm's pos_embed
// (trunc_normal_(std=.02), bounds +-2 absolute: a plain normal(0, 0.02)).
// Prefix tokens: learned kind, so each prefix token has its own learned row.
// Resampling: each table along its own axis, linear, antialias=True, align_corners=False
// (identical to plain linear interpolation when growing; averages when shrinking). Under the
// extrapolate policy each table keeps its entries and repeats its last one past them; under centre
// the entries sit in the middle of the new axis, the first and last repeated on either side.
#include <cstring>

#include "encodings/kinds.h"
#include "ops/resample.h"

namespace vitpe::enc {

namespace {

class Separable2d final : public TableTokenEncoding {
 public:
  Separable2d(int64_t dim, Grid grid, int64_t prefix, bool concat, Rng& rng)
      : TableTokenEncoding("separable2d", dim, grid, prefix), concat_(concat) {
    require(!concat || dim % 2 == 0, kind_,
            "mode=concat needs an even dim (D/2 per axis), got " + std::to_string(dim));
    const int64_t w = concat ? dim / 2 : dim;
    row_ = make("pos_embed_row", {grid.rows, w}, rng);
    col_ = make("pos_embed_col", {grid.cols, w}, rng);
    if (prefix > 0) prefix_param_ = make("pos_embed_prefix", {prefix, dim}, rng);
  }

  void resample(Grid new_grid) override {
    check_grid(kind_, new_grid);
    if (new_grid == grid_) return;
    row_.value = axis(row_.value, new_grid.rows);
    col_.value = axis(col_.value, new_grid.cols);
    row_.grad = Tensor::zeros(row_.value.shape());
    col_.grad = Tensor::zeros(col_.value.shape());
    grid_ = new_grid;
    cache_.clear();
  }

  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::interpolate, {.absolute = true});
  }

  std::vector<Param*> params() override {
    std::vector<Param*> p{&row_, &col_};
    if (prefix_ > 0) p.push_back(&prefix_param_);
    return p;
  }

 protected:
  void policy_changed() override { cache_.clear(); }

  const Tensor& table_ref(Grid grid) override {
    check_grid(kind_, grid);
    std::vector<const Tensor*> src{&row_.value, &col_.value};
    if (prefix_ > 0) src.push_back(&prefix_param_.value);
    return cache_.get(grid, src, [&] {
      Tensor row = grid.rows == grid_.rows ? row_.value : axis(row_.value, grid.rows);
      Tensor col = grid.cols == grid_.cols ? col_.value : axis(col_.value, grid.cols);
      const int64_t w = row.size(1);
      Tensor t = Tensor::empty({prefix_ + grid.count(), dim_});
      if (prefix_ > 0)
        std::memcpy(t.f32(), prefix_param_.value.f32(), sizeof(float) * prefix_ * dim_);
      for (int64_t r = 0; r < grid.rows; ++r)
        for (int64_t c = 0; c < grid.cols; ++c) {
          float* o = t.f32() + (prefix_ + r * grid.cols + c) * dim_;
          const float* a = row.f32() + r * w;
          const float* b = col.f32() + c * w;
          if (concat_) {
            std::memcpy(o, a, sizeof(float) * w);
            std::memcpy(o + w, b, sizeof(float) * w);
          } else {
            for (int64_t j = 0; j < w; ++j) o[j] = a[j] + b[j];
          }
        }
      return t;
    });
  }

  void table_backward(const Tensor& dtable, Grid grid) override {
    const float* d = dtable.f32();
    if (prefix_ > 0)
      for (int64_t i = 0; i < prefix_ * dim_; ++i) prefix_param_.grad.f32()[i] += d[i];
    const int64_t w = row_.value.size(1);
    // Gradients of the (possibly resampled) tables for this grid.
    Tensor drow = Tensor::zeros({grid.rows, w}), dcol = Tensor::zeros({grid.cols, w});
    for (int64_t r = 0; r < grid.rows; ++r)
      for (int64_t c = 0; c < grid.cols; ++c) {
        const float* g = d + (prefix_ + r * grid.cols + c) * dim_;
        float* a = drow.f32() + r * w;
        float* b = dcol.f32() + c * w;
        for (int64_t j = 0; j < w; ++j) {
          a[j] += g[j];
          b[j] += g[concat_ ? w + j : j];
        }
      }
    add_axis_grad(row_, drow, grid.rows, grid_.rows);
    add_axis_grad(col_, dcol, grid.cols, grid_.cols);
  }

 private:
  Param make(const std::string& name, const Shape& s, Rng& rng) {
    Param p;
    p.name = name;
    p.value = Tensor::empty(s);
    rng.fill_normal(p.value, 0.02);  // = timm's trunc_normal_(std=.02): bounds +-2 are 100 std
    p.grad = Tensor::zeros(s);
    p.no_decay = true;
    return p;
  }

  // Extrapolate and centre hold the tables' edges (from their first entry, or about the built
  // tables placed at centre_offset()); interpolate resamples them.
  bool holds_edges() const {
    const ExtensionRule r = extension_rule();
    return r == ExtensionRule::extrapolate || r == ExtensionRule::centre;
  }
  bool centred() const { return extension_rule() == ExtensionRule::centre; }

  // table [n, w] -> [m, w]: linear along the first axis (extrapolate: entry min(i, n-1); centre:
  // entry clamp(i - centre_offset(n, m), 0, n-1)).
  Tensor axis(const Tensor& table, int64_t m) const {
    if (holds_edges()) return resample_hold_edges(table, m, table.size(1), centred());
    return vitpe::resample(table, m, table.size(1), Filter::bilinear, /*antialias=*/true);
  }

  void add_axis_grad(Param& p, const Tensor& g, int64_t n_used, int64_t n_own) const {
    Tensor back = n_used == n_own ? g
                  : holds_edges() ? resample_hold_edges_backward(g, n_own, g.size(1), centred())
                                  : resample_backward(g, n_own, g.size(1), Filter::bilinear,
                                                      /*antialias=*/true);
    for (int64_t i = 0; i < back.numel(); ++i) p.grad.f32()[i] += back.f32()[i];
  }

  bool concat_;
  Param row_, col_, prefix_param_;
  DerivedCache cache_;
};

}  // namespace

KindDef separable2d_kind() {
  KindDef k;
  k.name = "separable2d";
  k.site = Site::token;
  k.options = {{"mode",
                "sum",
                "sum = row[r] + col[c] (D each); concat = [row[r] | col[c]] (D/2 each)",
                {"sum", "concat"}}};
  k.summary = "learned row table + column table; resampled linearly per axis";
  k.extension = ExtensionRule::interpolate;
  k.extension_note =
      "the row and column tables are resampled linearly along their axes; extrapolate: their "
      "last entries repeated; centre: their entries in the middle, the edge ones repeated";
  k.make_token = [](const Options& o, int64_t dim, Grid grid, int64_t prefix, Rng& rng) {
    return std::make_unique<Separable2d>(dim, grid, prefix, o.str("mode") == "concat", rng);
  };
  return k;
}

}  // namespace vitpe::enc
