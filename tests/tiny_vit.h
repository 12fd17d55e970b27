// A tiny ViT config for tests that need a whole model but not its size: 4-pixel patches, D 16,
// 2 heads, MLP 24 (the geometry and depth chosen by the caller).
#pragma once

#include <string>

#include "vit/models/model.h"

namespace vitpe::testing {

inline ModelConfig tiny_vit_config(const std::string& encoding, int64_t size, int64_t channels,
                                   int64_t depth, int64_t classes) {
  ModelConfig c;
  c.name = "tiny";
  c.img_rows = c.img_cols = size;
  c.channels = channels;
  c.patch = 4;
  c.vit().dim = 16;
  c.vit().depth = depth;
  c.vit().heads = 2;
  c.vit().mlp_dim = 24;
  c.classes = classes;
  c.preprocess.mean.assign(static_cast<size_t>(channels), 0.5f);
  c.preprocess.std_dev.assign(static_cast<size_t>(channels), 0.5f);
  c.encoding = encoding;
  return c;
}

}  // namespace vitpe::testing
