// `sincos2d`: fixed 2D sin-cos (MAE, "better plain ViT"): a quarter of the channels each for
// sin/cos of the column x and of the row y, w_k = T^(-k/P), P = D/4, k = 0..P-1; the table is
// sincos2d_table (encodings/tables.h), whose comment gives both channel layouts:
// layout=mae (default, MAE's get_2d_sincos_pos_embed) and layout=timm (build_sincos2d_pos_embed).
// MAE's layout is the default because MAE checkpoints and most papers use it.
// Options T (10000), layout. D % 4 == 0. Angles in double. Prefix tokens: fixed kind, zero (as
// MAE's class row). No parameters; another grid is recomputed.
#include <algorithm>

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

class Sincos2d final : public TableTokenEncoding {
 public:
  Sincos2d(int64_t dim, Grid grid, int64_t prefix, double temperature, bool timm_layout)
      : TableTokenEncoding("sincos2d", dim, grid, prefix),
        temperature_(temperature),
        timm_layout_(timm_layout) {
    require(
        dim % 4 == 0, kind_,
        "dim must be divisible by 4 (sin and cos of row and column), got " + std::to_string(dim));
  }

  std::vector<Param*> params() override { return {}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::extrapolate,
                        {.absolute = true, .frequencies = true});
  }

 protected:
  const Tensor& table_ref(Grid grid) override {
    check_grid(kind_, grid);
    return cache_.get(grid, {}, [&] {
      return sincos2d_table(grid, dim_, prefix_, temperature_,
                            timm_layout_ ? Sincos2dLayout::timm : Sincos2dLayout::mae,
                            axis(grid_.rows, grid.rows), axis(grid_.cols, grid.cols));
    });
  }
  void policy_changed() override { cache_.clear(); }

 private:
  // An axis of `size` cells, built with `built`, under the rule in effect: interpolate rescales
  // the coordinates into the built range, centre anchors the built cells at the middle, ntk
  // scales each frequency by its part (extrapolate: integer coordinates from the first cell).
  AxisCoordinates axis(int64_t built, int64_t size) const {
    const double ratio = static_cast<double>(size) / static_cast<double>(built);
    switch (extension_rule()) {
      case ExtensionRule::interpolate:
        return {static_cast<double>(built) / static_cast<double>(size), 0, 1};
      case ExtensionRule::centre:
        return {1, centre_offset(built, size), 1};
      case ExtensionRule::ntk:
        return {1, 0, ratio};
      default:
        return {};
    }
  }

  double temperature_;
  bool timm_layout_;
  DerivedCache cache_;
};

}  // namespace

KindDef sincos2d_kind() {
  KindDef k;
  k.name = "sincos2d";
  k.site = Site::token;
  k.options = {{"T",
                "10000",
                "temperature: w_k = T^(-k/(D/4)); grid: scaled to the built grid "
                "(the slowest turns a quarter across its longer side)",
                {},
                false,
                false,
                false,
                true},
               {"layout",
                "mae",
                "channel layout: mae = [sin x|cos x|sin y|cos y], timm = "
                "[sin y|sin x|cos y|cos x]",
                {"mae", "timm"}}};
  k.summary = "fixed 2D sin/cos, D/2 channels per axis (MAE); D % 4 == 0";
  k.extension = ExtensionRule::extrapolate;
  k.extension_note =
      "integer row and column coordinates run past the trained range; interpolate: coordinates "
      "(r R0/R, c C0/C) in the built range; centre: the built grid in the middle, coordinates "
      "running past it on both sides; ntk: frequency k of D/4 scales its coordinate by "
      "s^(-k/(D/4-1))";
  k.make_token = [](const Options& o, int64_t dim, Grid grid, int64_t prefix, Rng&) {
    const double t = o.str("T") == "grid" ? grid_scaled_base(dim / 4, std::max(grid.rows, grid.cols))
                                           : o.number("T");
    return std::make_unique<Sincos2d>(dim, grid, prefix, t, o.str("layout") == "timm");
  };
  return k;
}

}  // namespace vitpe::enc
