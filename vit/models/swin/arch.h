// The architecture of timm's SwinTransformer family (Swin and Swin V2) as plain fields, as
// `vit/models/swin/swin.h` runs them.
#pragma once

#include <cstdint>
#include <vector>

namespace vitpe {

struct SwinArch {
  int64_t dim = 96;                                   // stage 0's width; stage i has dim * 2^i
  std::vector<int64_t> depths = {2, 2, 6, 2};         // blocks per stage (Swin-T)
  std::vector<int64_t> stage_heads = {3, 6, 12, 24};  // heads per stage
  int64_t window = 7;      // window side in tokens (clamped to a stage's grid when larger)
  float mlp_ratio = 4.0f;  // MLP hidden width / stage width
  // Swin V2 (Liu et al. 2022; timm's swinv2_*): residual post-norm blocks, scaled cosine
  // attention with a learned per-head temperature, q and v biases, patch merging that normalises
  // after the reduction. Its position bias is the `cpb` encoding.
  bool v2 = false;
  float eps = 1e-5f;  // LayerNorm epsilon (timm's Swin 1e-5)

  bool operator==(const SwinArch&) const = default;
};

}  // namespace vitpe
