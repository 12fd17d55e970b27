// `sincos1d`: Vaswani et al.'s fixed encoding over the row-major flattened patch index p:
//   PE(p, 2i) = sin(p * w_i), PE(p, 2i+1) = cos(p * w_i), w_i = T^(-2i/D), i = 0..D/2-1.
// Option T (default 10000). D must be even. Angles are computed in double, so the values stay
// accurate for large positions. Prefix tokens: fixed kind, so they get zero. No parameters (no
// checkpoint names); another grid is simply recomputed.

#include "encodings/kinds.h"
#include "encodings/tables.h"

namespace vitpe::enc {

namespace {

class Sincos1d final : public TableTokenEncoding {
 public:
  Sincos1d(int64_t dim, Grid grid, int64_t prefix, double temperature)
      : TableTokenEncoding("sincos1d", dim, grid, prefix), temperature_(temperature) {
    require(dim % 2 == 0, kind_, "dim must be even (sin/cos pairs), got " + std::to_string(dim));
  }

  std::vector<Param*> params() override { return {}; }
  ExtensionRule extension_rule() const override {
    return resolve_rule(policy_, ExtensionRule::extrapolate);
  }

 protected:
  const Tensor& table_ref(Grid grid) override {
    check_grid(kind_, grid);
    return cache_.get(grid, {}, [&] {
      if (grid == grid_ || extension_rule() == ExtensionRule::extrapolate)
        return sincos1d_table(grid.count(), dim_, prefix_, temperature_);
      // interpolate: patch (r, c) at the built grid's coordinates (r R0/R, c C0/C), flattened
      // with the built row length.
      std::vector<double> positions(static_cast<size_t>(grid.count()));
      const double sy = static_cast<double>(grid_.rows) / grid.rows;
      const double sx = static_cast<double>(grid_.cols) / grid.cols;
      for (int64_t n = 0; n < grid.count(); ++n) {
        positions[n] = static_cast<double>(patch_row(n, grid.cols)) * sy * grid_.cols +
                       static_cast<double>(patch_col(n, grid.cols)) * sx;
      }
      return sincos1d_table(positions, dim_, prefix_, temperature_);
    });
  }
  void policy_changed() override { cache_.clear(); }

 private:
  double temperature_;
  DerivedCache cache_;
};

}  // namespace

KindDef sincos1d_kind() {
  KindDef k;
  k.name = "sincos1d";
  k.site = Site::token;
  k.options = {{"T", "10000", "temperature: w_i = T^(-2i/D)", {}}};
  k.summary = "fixed sin/cos of the flattened patch index (Vaswani); D even";
  k.extension = ExtensionRule::extrapolate;
  k.extension_note =
      "flattened patch indices run past the trained range (and change with the row length); "
      "interpolate: patch (r, c) at index (r R0/R) C0 + c C0/C of the built grid";
  // A flattened-index position ignores the 2D grid that windowed models are built around.
  k.studied_windowed = false;
  k.make_token = [](const Options& o, int64_t dim, Grid grid, int64_t prefix, Rng&) {
    return std::make_unique<Sincos1d>(dim, grid, prefix, o.number("T"));
  };
  return k;
}

}  // namespace vitpe::enc
