// Attention diagnostics for the comparison report: what a trained model's attention
// does at a given image size, measured on test images.
//   mean attention distance (the ViT paper's Fig. 7, right): for each block and head, the
//     attention-weighted Euclidean distance in patches from a patch query to the patch keys,
//     sum_k p(q, k) |pos(q) - pos(k)| / sum_k p(q, k) over patch keys k, averaged over patch
//     queries and images;
//   attention entropy: for each block, -sum_k p(q, k) ln p(q, k) over all keys (prefix tokens
//     included), averaged over heads, patch queries and images, in nats; ln N is uniform
//     attention over N tokens, so it grows with the grid when attention spreads out.
// Global attention (ViT) only; windowed models (Swin) give empty statistics.
#pragma once

#include <cstdint>
#include <vector>

#include "vit/models/model.h"
#include "vit/train/data.h"

namespace vitpe {

struct AttentionStats {
  std::vector<std::vector<double>> distance;  // [block][head], patches
  std::vector<double> entropy;                // [block], nats
  bool empty() const { return entropy.empty(); }
};

// The statistics of `model` (f32) on the first `images` images of `data` (batches of 32), with
// the model's current extension policy. Empty for models without global attention maps.
AttentionStats attention_stats(Model& model, const Dataset& data, int64_t images = 64);

// Uniform attention's statistics, the baselines a trained model's are read against: on a grid,
// the mean distance in patches from a patch query to the patch keys (every pair, a query to
// itself included: 3.61 on 7x7, 7.28 on 14x14), and ln N over prefix + grid.count() tokens.
double uniform_attention_distance(Grid grid);
double uniform_attention_entropy(int64_t prefix, Grid grid);

// The same from attention probabilities [B, H, N, N] over `prefix` tokens and a grid (one
// block), accumulated into distance[h] and entropy sums with `count` queries seen (for tests
// and for attention_stats).
void accumulate_attention_stats(const Tensor& probs, int64_t prefix, Grid grid,
                                std::vector<double>& distance_sum, double& entropy_sum,
                                int64_t& queries);

}  // namespace vitpe
