// Attention diagnostics (see diagnostics.h).
#include "vit/compare/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "vit/models/family.h"

namespace vitpe {

void accumulate_attention_stats(const Tensor& probs, int64_t prefix, Grid grid,
                                std::vector<double>& distance_sum, double& entropy_sum,
                                int64_t& queries) {
  if (probs.ndim() != 4 || probs.size(2) != probs.size(3) ||
      probs.size(2) != prefix + grid.count()) {
    throw ShapeError("attention_stats: expected probabilities [B, H, " +
                     std::to_string(prefix + grid.count()) + ", " +
                     std::to_string(prefix + grid.count()) + "] for " + std::to_string(prefix) +
                     " prefix tokens and a " + grid.str() + " grid, found " + probs.shape().str());
  }
  const int64_t B = probs.size(0), H = probs.size(1), N = probs.size(2);
  if (static_cast<int64_t>(distance_sum.size()) != H) distance_sum.assign(H, 0.0);
  // Distances between patches, computed once.
  const int64_t P = grid.count();
  std::vector<double> dist(static_cast<size_t>(P * P));
  for (int64_t a = 0; a < P; ++a)
    for (int64_t b = 0; b < P; ++b) {
      const double dy = static_cast<double>(a / grid.cols - b / grid.cols);
      const double dx = static_cast<double>(a % grid.cols - b % grid.cols);
      dist[a * P + b] = std::sqrt(dy * dy + dx * dx);
    }
  const float* p = probs.f32();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t q = 0; q < P; ++q) {
        const float* row = p + ((b * H + h) * N + prefix + q) * N;
        double weight = 0, weighted = 0, entropy = 0;
        for (int64_t k = 0; k < N; ++k) {
          const double v = row[k];
          if (v > 0) entropy -= v * std::log(v);
          if (k >= prefix) {
            weight += v;
            weighted += v * dist[q * P + (k - prefix)];
          }
        }
        distance_sum[h] += weight > 0 ? weighted / weight : 0.0;
        entropy_sum += entropy / static_cast<double>(H);
        if (h == 0) ++queries;
      }
}

double uniform_attention_distance(Grid grid) {
  if (grid.count() <= 0) return 0;
  // Sum over pairs by offset: (R - |dy|) (C - |dx|) pairs lie at each offset (dy, dx).
  double sum = 0;
  for (int64_t dy = 1 - grid.rows; dy < grid.rows; ++dy)
    for (int64_t dx = 1 - grid.cols; dx < grid.cols; ++dx)
      sum += static_cast<double>((grid.rows - std::abs(dy)) * (grid.cols - std::abs(dx))) *
             std::sqrt(static_cast<double>(dy * dy + dx * dx));
  const double n = static_cast<double>(grid.count());
  return sum / (n * n);
}

double uniform_attention_entropy(int64_t prefix, Grid grid) {
  return std::log(static_cast<double>(prefix + grid.count()));
}

AttentionStats attention_stats(Model& model, const Dataset& data, int64_t images) {
  AttentionStats out;
  // Windowed attention has no maps over the whole grid (Model::attention_maps).
  if (family_of(model.config()).layout != AttentionLayout::global ||
      model.precision() != Precision::f32) {
    return out;
  }
  const int64_t n = std::min(images, data.size());
  std::vector<std::vector<double>> dsum;
  std::vector<double> esum;
  std::vector<int64_t> count;
  for (int64_t start = 0; start < n; start += 32) {
    const int64_t B = std::min<int64_t>(32, n - start);
    Tensor x = Tensor::empty({B, data.channels(), data.rows(), data.cols()});
    for (int64_t i = 0; i < B; ++i) data.get(start + i, x.f32() + i * data.image_numel());
    model.forward(x, /*training=*/true);
    const Model::AttentionMaps maps = model.attention_maps();
    if (maps.probs.empty()) return out;
    dsum.resize(maps.probs.size());
    esum.resize(maps.probs.size(), 0.0);
    count.resize(maps.probs.size(), 0);
    for (size_t blk = 0; blk < maps.probs.size(); ++blk) {
      accumulate_attention_stats(*maps.probs[blk], maps.prefix, maps.grid, dsum[blk], esum[blk],
                                 count[blk]);
    }
  }
  for (size_t blk = 0; blk < dsum.size(); ++blk) {
    const double c = static_cast<double>(std::max<int64_t>(count[blk], 1));
    std::vector<double> d = dsum[blk];
    for (double& v : d) v /= c;
    out.distance.push_back(std::move(d));
    out.entropy.push_back(esum[blk] / c);
  }
  return out;
}

}  // namespace vitpe
