// `sincos2d`: fixed 2D sin-cos (MAE, "better plain ViT"): a quarter of the channels each for
// sin/cos of the column x and of the row y, w_k = T^(-k/P), P = D/4, k = 0..P-1.
//   layout=mae  (default, MAE's get_2d_sincos_pos_embed): [sin(x w) | cos(x w) | sin(y w) | cos(y
//   w)] layout=timm (timm's build_sincos2d_pos_embed):        [sin(y w) | sin(x w) | cos(y w) |
//   cos(x w)]
// MAE's layout is the default because MAE checkpoints and most papers use it.
// Options T (10000), layout. D % 4 == 0. Angles in double. Prefix tokens: fixed kind, zero (as
// MAE's class row). No parameters; another grid is recomputed.
#include <cmath>

#include "encodings/kinds.h"

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

  void resample(Grid new_grid) override {
    check_grid(kind_, new_grid);
    grid_ = new_grid;
  }
  std::vector<Param*> params() override { return {}; }

 protected:
  const Tensor& table_ref(Grid grid) override {
    check_grid(kind_, grid);
    return cache_.get(grid, {}, [&] {
      const int64_t P = dim_ / 4;
      // Offsets of the four quarter blocks.
      const int64_t sx = timm_layout_ ? P : 0, cx = timm_layout_ ? 3 * P : P;
      const int64_t sy = timm_layout_ ? 0 : 2 * P, cy = timm_layout_ ? 2 * P : 3 * P;
      Tensor t = Tensor::zeros({prefix_ + grid.count(), dim_});
      for (int64_t n = 0; n < grid.count(); ++n) {
        float* row = t.f32() + (prefix_ + n) * dim_;
        const double y = static_cast<double>(patch_row(n, grid.cols));
        const double x = static_cast<double>(patch_col(n, grid.cols));
        for (int64_t k = 0; k < P; ++k) {
          double w = std::pow(temperature_, -static_cast<double>(k) / P);
          row[sx + k] = static_cast<float>(std::sin(x * w));
          row[cx + k] = static_cast<float>(std::cos(x * w));
          row[sy + k] = static_cast<float>(std::sin(y * w));
          row[cy + k] = static_cast<float>(std::cos(y * w));
        }
      }
      return t;
    });
  }

 private:
  double temperature_;
  bool timm_layout_;
  DerivedCache cache_;
};

}  // namespace

KindDef sincos2d_kind() {
  KindDef k;
  k.name = "sincos2d";
  k.site = Site::token;
  k.options = {{"T", "10000", "temperature: w_k = T^(-k/(D/4))", {}},
               {"layout",
                "mae",
                "channel layout: mae = [sin x|cos x|sin y|cos y], timm = "
                "[sin y|sin x|cos y|cos x]",
                {"mae", "timm"}}};
  k.summary = "fixed 2D sin/cos, D/2 channels per axis (MAE); D % 4 == 0";
  k.make_token = [](const Options& o, int64_t dim, Grid grid, int64_t prefix, Rng&) {
    return std::make_unique<Sincos2d>(dim, grid, prefix, o.number("T"), o.str("layout") == "timm");
  };
  return k;
}

}  // namespace vitpe::enc
