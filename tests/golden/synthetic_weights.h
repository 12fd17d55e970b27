// Synthetic weights for goldens too large to store (tests/data/vit_s16_synth_io.safetensors):
// every tensor is a deterministic function of its timm name, computed identically here and in
// tests/golden/make_goldens.py (`synthetic`). Integer hashing plus exactly rounded f32 ops, so
// both sides produce bit-identical values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ops/tensor.h"

namespace vitpe::testing {

inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// value_i = (splitmix64(fnv1a64(name) + (i + 1) * golden) >> 40) * 2^-24 - 0.5, in [-0.5, 0.5).
inline float synthetic_uniform(uint64_t name_hash, uint64_t i) {
  uint64_t z = name_hash + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  return static_cast<float>(z >> 40) * 0x1.0p-24f - 0.5f;
}

// The tensor of timm parameter `name` (or "input"): LayerNorm weights (1-D ".weight"): 1 + v/2;
// other 1-D tensors: v/4; pos_embed, cls_token, input: 2v; everything else: v/8.
inline Tensor synthetic_tensor(const std::string& name, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  const uint64_t h = fnv1a64(name);
  const bool ends_weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = synthetic_uniform(h, static_cast<uint64_t>(i));
    if (name == "pos_embed" || name == "cls_token" || name == "input") {
      v = v * 2.0f;
    } else if (shape.size() == 1 && ends_weight) {
      v = 1.0f + v * 0.5f;
    } else if (shape.size() == 1) {
      v = v * 0.25f;
    } else {
      v = v * 0.125f;
    }
    t.at(i) = v;
  }
  return t;
}

// fnv1a64 of the tensors' "name:d0xd1x...\n" lines in name order, as 16 hex digits: what
// tests/golden/make_*_goldens.py record of timm's state dict (`state_dict_hash`), so a test can
// tell that the file it writes has timm's names and shapes. Sorts `tensors` by name.
inline std::string state_dict_hash(std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string lines;
  for (const auto& [name, t] : tensors) {
    std::string dims;
    for (int64_t d : t.shape().vec()) {
      if (!dims.empty()) dims += 'x';  // (one append at a time: GCC 12's -Wrestrict misfires)
      dims += std::to_string(d);
    }
    lines += name + ":" + dims + "\n";
  }
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(lines)));
  return hash;
}

}  // namespace vitpe::testing
