// Swin Transformer (Liu et al. 2021; timm >= 0.9 layout and names) with interchangeable
// encodings. relbias (a per-block relative-position bias table) is Swin's own; token kinds are
// added after the patch embedding's LayerNorm; attention kinds see window-local positions.
//
// images [B, C, H, W] -> patch embed + LN [B, L, C0] -> (token encoding) -> stages:
//   stage i > 0 starts with patch merging (2x2 concat -> LN(4C) -> Linear(4C -> 2C, no bias)),
//   then blocks: x + attn(windows(shift(norm1(x)))) with the shift mask on odd blocks, then
//   + mlp(norm2(.)) -> LN -> mean over tokens -> head -> logits [B, classes].
// A window larger than a stage's resolution is clamped to it (per axis) with shift 0; sizes
// not divisible by the window are padded after the shift, as timm does.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "vit/models/layers.h"
#include "vit/models/model.h"

namespace vitpe {

class SwinBlock {
 public:
  SwinBlock(const std::string& name, int64_t dim, int64_t heads, int64_t hidden, float eps,
            Grid window, bool shifted, const EncodingSpec& spec, Rng& rng, Rng& enc_rng,
            BlockStyle style = BlockStyle::pre_norm);
  // x: [B, L, C] on the grid `res` -> y: [B, L, C]
  void forward(Tensor& y, const Tensor& x, Grid res, bool training);
  void backward(Tensor& dx, const Tensor& dy);  // overwrites dx
  void collect(std::vector<Param*>& out) { block_.collect(out); }
  void collect_linears(std::vector<LinearLayer*>& out) { block_.collect_linears(out); }
  AttentionLayer& attention() { return block_.attention(); }

 private:
  const WindowLayout& layout(Grid res);

  Grid window_;
  bool shifted_;
  TransformerBlock block_;
  std::map<std::pair<int64_t, int64_t>, WindowLayout> layouts_;  // per resolution
};

// Swin's patch merging: the 2x2 neighbours concatenated (4C), normalised, reduced to 2C; with
// norm_after (Swin V2) reduced first, then normalised over 2C.
class PatchMerging {
 public:
  PatchMerging(const std::string& name, int64_t dim, float eps, Rng& rng, bool norm_after = false);
  // x: [B, H*W, C] -> y: [B, ceil(H/2)*ceil(W/2), 2C] (odd sizes padded with zeros)
  void forward(Tensor& y, const Tensor& x, Grid res, bool training);
  void backward(Tensor& dx, const Tensor& dy);
  void collect(std::vector<Param*>& out) {
    if (norm_after_) reduction_.collect(out);
    norm_.collect(out);
    if (!norm_after_) reduction_.collect(out);
  }
  void collect_linears(std::vector<LinearLayer*>& out) { out.push_back(&reduction_); }

 private:
  LayerNormLayer norm_;
  LinearLayer reduction_;
  bool norm_after_ = false;
  Grid res_;
  Tensor cat_, normed_, dnormed_, dcat_;  // V2: normed_ is the reduction's output
};

class SwinTransformer : public Model {
 public:
  SwinTransformer(const ModelConfig& config, uint64_t seed);

  const ModelConfig& config() const override { return cfg_; }
  const Tensor& forward(const Tensor& images, bool training = false) override;
  Features forward_features(const Tensor& images) override;
  void backward(const Tensor& dlogits) override;
  std::vector<std::pair<Param*, int64_t>> layered_params() override;
  int64_t blocks() const override;
  std::vector<Param*> head_params() override;
  EncodingParts encoding_parts() override;
  double flops_per_image() const override;

 protected:
  void collect_linears(std::vector<LinearLayer*>& out) override;

 private:
  ModelConfig cfg_;
  const SwinArch& arch_;  // cfg_'s
  Param patch_w_, patch_b_;
  LayerNormLayer patch_norm_;
  std::unique_ptr<TokenEncoding> token_enc_;
  std::vector<std::unique_ptr<PatchMerging>> merges_;  // merges_[i] starts stage i+1
  std::vector<std::vector<std::unique_ptr<SwinBlock>>> stages_;
  LayerNormLayer norm_;
  LinearLayer head_;

  Tensor images_, patches_, embedded_, normed_, pooled_, logits_;
  std::vector<Tensor> merged_;             // per stage > 0
  std::vector<std::vector<Tensor>> outs_;  // per stage, per block
  std::vector<Grid> res_;                  // per stage
  Tensor d_pooled_, d_normed_, d_a_, d_b_, d_patches_, d_embedded_;
};

}  // namespace vitpe
