// `learned1d`: a learned table added to the tokens, timm's VisionTransformer layout.
//
// Parameter: "pos_embed" [1, prefix + rows*cols, D] (timm's name and shape), rows = prefix
// tokens first, then patches row-major. Initialised as timm's trunc_normal_(std=.02), whose
// bounds (+-2, absolute) lie 100 std out, i.e. a plain normal(0, 0.02) (Rng::trunc_normal would
// cut at +-2 std instead, shrinking the std to 0.0176).
// Prefix tokens: learned kind, so each prefix token has its own learned row (timm's class row).
// Resampling to another grid: timm's resample_abs_pos_embed: the prefix rows are kept, the
// patch rows are interpolated as D planes [rows, cols] with bicubic, antialias=True,
// align_corners=False (ops/resample.h). forward() with another grid uses a cached resampled
// table (recomputed when the learned values change); backward() then goes through the adjoint
// of the resampling. Under the extrapolate policy the built table is anchored at the top-left
// patch and its last row and column are repeated past it (a smaller grid takes its top-left part);
// under centre it sits in the middle of the new grid, its edge rows and columns repeated on every
// side (a smaller grid takes its middle part).
#include <cstring>

#include "encodings/kinds.h"
#include "ops/resample.h"

namespace vitpe::enc {

namespace {

class Learned1d final : public TableTokenEncoding {
 public:
  Learned1d(int64_t dim, Grid grid, int64_t prefix, Rng& rng)
      : TableTokenEncoding("learned1d", dim, grid, prefix) {
    param_.name = "pos_embed";
    param_.value = Tensor::empty({1, prefix + grid.count(), dim});
    rng.fill_normal(param_.value, 0.02);  // = timm's trunc_normal_(std=.02): bounds +-2 are 100 std
    param_.grad = Tensor::zeros(param_.value.shape());
    param_.no_decay = true;
  }

  void resample(Grid new_grid) override {
    check_grid(kind_, new_grid);
    if (new_grid == grid_) return;
    Tensor t = resampled(new_grid);
    param_.value = t.reshape({1, prefix_ + new_grid.count(), dim_});
    param_.grad = Tensor::zeros(param_.value.shape());
    grid_ = new_grid;
    cache_.clear();
  }

  std::vector<Param*> params() override { return {&param_}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::interpolate, {.absolute = true});
  }

 protected:
  void policy_changed() override { cache_.clear(); }

  const Tensor& table_ref(Grid grid) override {
    if (grid == grid_) {
      view_ = param_.value.reshape({prefix_ + grid_.count(), dim_});
      return view_;
    }
    check_grid(kind_, grid);
    return cache_.get(grid, {&param_.value}, [&] { return resampled(grid); });
  }

  void table_backward(const Tensor& dtable, Grid grid) override {
    float* g = param_.grad.f32();
    const float* d = dtable.f32();
    if (grid == grid_) {
      for (int64_t i = 0; i < dtable.numel(); ++i) g[i] += d[i];
      return;
    }
    for (int64_t i = 0; i < prefix_ * dim_; ++i) g[i] += d[i];
    Tensor dplanes = patch_rows_to_planes(dtable, prefix_, grid);
    Tensor back = holds_edges()
                      ? resample_hold_edges_backward(dplanes, grid_.rows, grid_.cols, centred())
                      : resample_backward(dplanes, grid_.rows, grid_.cols, Filter::bicubic, true);
    Tensor gview = param_.grad.reshape({prefix_ + grid_.count(), dim_});
    planes_to_patch_rows(back, gview, prefix_, grid_, /*accumulate=*/true);
  }

 private:
  // Extrapolate and centre hold the built table's edges (anchored at its first patch or at the
  // middle of the new grid); interpolate resamples it.
  bool holds_edges() const {
    const ExtensionRule r = extension_rule();
    return r == ExtensionRule::extrapolate || r == ExtensionRule::centre;
  }
  bool centred() const { return extension_rule() == ExtensionRule::centre; }

  // The table [prefix + new_grid.count(), D] resampled from the learned one (extrapolate: the
  // patch rows at (min(r, R0-1), min(c, C0-1)), the built grid's edges held; centre: the same
  // about the built grid placed at centre_offset()).
  Tensor resampled(Grid new_grid) const {
    Tensor src = param_.value.reshape({prefix_ + grid_.count(), dim_});
    Tensor planes = patch_rows_to_planes(src, prefix_, grid_);
    Tensor out_planes = holds_edges()
                            ? resample_hold_edges(planes, new_grid.rows, new_grid.cols, centred())
                            : vitpe::resample(planes, new_grid.rows, new_grid.cols, Filter::bicubic,
                                              /*antialias=*/true);
    Tensor out = Tensor::empty({prefix_ + new_grid.count(), dim_});
    std::memcpy(out.f32(), src.f32(), sizeof(float) * prefix_ * dim_);
    planes_to_patch_rows(out_planes, out, prefix_, new_grid, /*accumulate=*/false);
    return out;
  }

  Param param_;
  Tensor view_;
  DerivedCache cache_;
};

}  // namespace

KindDef learned1d_kind() {
  KindDef k;
  k.name = "learned1d";
  k.site = Site::token;
  k.summary = "learned table [prefix + rows*cols, D] (timm pos_embed); resampled bicubic+antialias";
  k.extension = ExtensionRule::interpolate;
  k.extension_note =
      "the table is resampled bicubic with antialias, as timm's resample_abs_pos_embed; "
      "extrapolate: the built table anchored top-left, its last row and column repeated; centre: "
      "anchored in the middle, its edges repeated on every side";
  // A flattened-index position ignores the 2D grid that windowed models are built around.
  k.studied_windowed = false;
  k.make_token = [](const Options&, int64_t dim, Grid grid, int64_t prefix, Rng& rng) {
    return std::make_unique<Learned1d>(dim, grid, prefix, rng);
  };
  return k;
}

}  // namespace vitpe::enc
