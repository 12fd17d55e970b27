// The fixed encodings' numbers (see tables.h).
#include "encodings/tables.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace vitpe {

namespace {
void require(bool cond, const char* what, const std::string& found) {
  if (!cond) throw std::invalid_argument(std::string(what) + ", got " + found);
}
}  // namespace

double grid_scaled_base(int64_t frequencies, int64_t side) {
  if (frequencies < 2 || side < 2) return 1.0;
  const double n = static_cast<double>(frequencies);
  return std::pow(2.0 * static_cast<double>(side - 1) / 3.14159265358979323846, n / (n - 1));
}

Tensor sincos2d_table(Grid grid, int64_t dim, int64_t prefix, double temperature,
                      Sincos2dLayout layout, double scale_y, double scale_x) {
  return sincos2d_table(grid, dim, prefix, temperature, layout, AxisCoordinates{scale_y, 0, 1},
                        AxisCoordinates{scale_x, 0, 1});
}

Tensor sincos2d_table(Grid grid, int64_t dim, int64_t prefix, double temperature,
                      Sincos2dLayout layout, AxisCoordinates ay, AxisCoordinates ax) {
  require(dim > 0 && dim % 4 == 0, "sincos2d: dim must be a positive multiple of 4",
          std::to_string(dim));
  const int64_t P = dim / 4;
  const bool timm = layout == Sincos2dLayout::timm;
  // Offsets of the four quarter blocks.
  const int64_t sx = timm ? P : 0, cx = timm ? 3 * P : P;
  const int64_t sy = timm ? 0 : 2 * P, cy = timm ? 2 * P : 3 * P;
  Tensor t = Tensor::zeros({prefix + grid.count(), dim});
  for (int64_t n = 0; n < grid.count(); ++n) {
    float* row = t.f32() + (prefix + n) * dim;
    const double y = static_cast<double>(n / grid.cols - ay.offset) * ay.scale;
    const double x = static_cast<double>(n % grid.cols - ax.offset) * ax.scale;
    for (int64_t k = 0; k < P; ++k) {
      const double w = std::pow(temperature, -static_cast<double>(k) / P);
      const double xw = x * w * ntk_scale(k, P, ax.ntk), yw = y * w * ntk_scale(k, P, ay.ntk);
      row[sx + k] = static_cast<float>(std::sin(xw));
      row[cx + k] = static_cast<float>(std::cos(xw));
      row[sy + k] = static_cast<float>(std::sin(yw));
      row[cy + k] = static_cast<float>(std::cos(yw));
    }
  }
  return t;
}

Tensor sincos1d_table(const std::vector<double>& positions, int64_t dim, int64_t prefix,
                      double temperature) {
  require(dim > 0 && dim % 2 == 0, "sincos1d: dim must be positive and even", std::to_string(dim));
  const int64_t tokens = static_cast<int64_t>(positions.size());
  Tensor t = Tensor::zeros({prefix + tokens, dim});
  float* p = t.f32() + prefix * dim;
  for (int64_t n = 0; n < tokens; ++n) {
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double a = positions[n] * std::pow(temperature, -2.0 * i / dim);
      p[n * dim + 2 * i] = static_cast<float>(std::sin(a));
      p[n * dim + 2 * i + 1] = static_cast<float>(std::cos(a));
    }
  }
  return t;
}

Tensor sincos1d_table(int64_t tokens, int64_t dim, int64_t prefix, double temperature) {
  std::vector<double> positions(static_cast<size_t>(tokens > 0 ? tokens : 0));
  for (size_t n = 0; n < positions.size(); ++n) positions[n] = static_cast<double>(n);
  return sincos1d_table(positions, dim, prefix, temperature);
}

std::vector<double> alibi2d_slopes(int64_t heads) {
  require(heads >= 1, "alibi2d: heads must be >= 1", std::to_string(heads));
  std::vector<double> s(heads);
  for (int64_t h = 0; h < heads; ++h)
    s[h] = std::pow(2.0, -8.0 * static_cast<double>(h + 1) / heads);
  return s;
}

std::vector<double> alibi2d_grid_slopes(int64_t heads, Grid window) {
  require(heads >= 1, "alibi2d: heads must be >= 1", std::to_string(heads));
  const double dy = static_cast<double>(window.rows - 1), dx = static_cast<double>(window.cols - 1);
  const double gentlest = 1.0 / std::max(1.0, std::sqrt(dy * dy + dx * dx));
  if (heads == 1) return {gentlest};
  const double steepest = std::max(gentlest, std::pow(2.0, -8.0 / static_cast<double>(heads)));
  std::vector<double> s(heads);
  for (int64_t h = 0; h < heads; ++h)
    s[h] = steepest * std::pow(gentlest / steepest,
                               static_cast<double>(h) / static_cast<double>(heads - 1));
  return s;
}

void rope_axial_tables(Tensor& cos, Tensor& sin, Grid grid, int64_t head_dim,
                       const RopeAxialLayout& layout) {
  require(head_dim > 0 && head_dim % 4 == 0,
          "rope-axial: head_dim must be a positive multiple of 4", std::to_string(head_dim));
  const int64_t half = head_dim / 2, quarter = head_dim / 4;
  cos = Tensor::empty({1, grid.count(), half});
  sin = Tensor::empty({1, grid.count(), half});
  for (int64_t n = 0; n < grid.count(); ++n) {
    const double x = static_cast<double>(n % grid.cols) * layout.scale_x + layout.offset_x;
    const double y = static_cast<double>(n / grid.cols) * layout.scale_y + layout.offset_y;
    const double first = layout.x_first ? x : y, second = layout.x_first ? y : x;
    for (int64_t p = 0; p < half; ++p) {
      const int64_t k = p % quarter;
      const bool first_half = p < quarter;
      const double ratio = first_half == layout.x_first ? layout.ntk_x : layout.ntk_y;
      const double a = (first_half ? first : second) * std::pow(layout.theta, -4.0 * k / head_dim) *
                       ntk_scale(k, quarter, ratio);
      cos.f32()[n * half + p] = static_cast<float>(std::cos(a));
      sin.f32()[n * half + p] = static_cast<float>(std::sin(a));
    }
  }
}

Tensor rope_axial_freqs(int64_t heads, int64_t head_dim, const RopeAxialLayout& layout) {
  require(heads >= 1, "rope-axial: heads must be >= 1", std::to_string(heads));
  require(head_dim > 0 && head_dim % 4 == 0,
          "rope-axial: head_dim must be a positive multiple of 4", std::to_string(head_dim));
  const int64_t half = head_dim / 2, quarter = head_dim / 4;
  const int first = layout.x_first ? 0 : 1;  // the axis of the first half of the pairs
  const double s0 = layout.x_first ? layout.scale_x : layout.scale_y;
  const double s1 = layout.x_first ? layout.scale_y : layout.scale_x;
  const double r0 = layout.x_first ? layout.ntk_x : layout.ntk_y;
  const double r1 = layout.x_first ? layout.ntk_y : layout.ntk_x;
  Tensor f = Tensor::zeros({heads, half, 2});
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t k = 0; k < quarter; ++k) {
      const double w = std::pow(layout.theta, -4.0 * k / head_dim);
      f.f32()[(h * half + k) * 2 + first] = static_cast<float>(s0 * w * ntk_scale(k, quarter, r0));
      f.f32()[(h * half + quarter + k) * 2 + (1 - first)] =
          static_cast<float>(s1 * w * ntk_scale(k, quarter, r1));
    }
  }
  return f;
}

Tensor rope_freqs_from_planes(const Tensor& planes) {
  check_cpu_f32("rope_freqs_from_planes", "planes", planes);
  if (planes.ndim() != 3 || planes.size(0) != 2) {
    throw ShapeError("rope_freqs_from_planes: expected planes [2, H, hd/2], found " +
                     planes.shape().str());
  }
  const int64_t H = planes.size(1), half = planes.size(2);
  Tensor f = Tensor::empty({H, half, 2});
  const float* p = planes.f32();
  for (int64_t i = 0; i < H * half; ++i) {
    f.f32()[2 * i] = p[i];
    f.f32()[2 * i + 1] = p[H * half + i];
  }
  return f;
}

}  // namespace vitpe
