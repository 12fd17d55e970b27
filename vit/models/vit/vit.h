// Vision Transformer (Dosovitskiy et al.; timm's VisionTransformer layout and names) with an
// interchangeable positional encoding at the input site and/or in every block.
//
// images [B, C, H, W] -> patch embed [B, Np, D] -> prepend class token -> token encoding
// -> blocks x depth (a conditional encoding, CPVT's PEG, after the block it names) -> pool (class
// token, or mean of patch tokens) -> norm (fc_norm for mean pooling, as timm) -> head -> logits [B,
// classes]. Variants (VitArch): no_embed_class (the token encoding before the class token is
// prepended, on the patch tokens only), layer scale in every block (DeiT-III) and register
// tokens after the class token (prefix tokens: class, registers, then the patches), or DeiT's
// distillation token with its own head (class, distillation, patches; logits: the heads' mean).
#pragma once

#include <memory>
#include <vector>

#include "vit/models/layers.h"
#include "vit/models/model.h"

namespace vitpe {

class VisionTransformer : public Model {
 public:
  VisionTransformer(const ModelConfig& config, uint64_t seed);

  const ModelConfig& config() const override { return cfg_; }
  const Tensor& forward(const Tensor& images, bool training = false) override;
  void backward(const Tensor& dlogits) override;
  std::vector<Param*> params() override;
  double flops_per_image() const override;

  TokenEncoding* token_encoding() { return token_enc_.get(); }
  EncodingParts encoding_parts() override;
  AttentionMaps attention_maps() override;

 protected:
  void collect_linears(std::vector<LinearLayer*>& out) override;

 private:
  int64_t prefix() const { return arch_.prefix_tokens(); }
  // The learned prefix tokens in token order (class [1, 1, D], distillation [1, 1, D], registers
  // [1, R, D]): what forward copies before the patches and backward accumulates into.
  std::vector<Param*> prefix_params();
  const Tensor& forward_distilled(const Tensor& tokens, bool training);
  // The conditional encoding's forward on the output of `blocks_run` blocks (0: their input),
  // and its backward on that output's gradient, when it sits there.
  void apply_conditional(size_t blocks_run, Tensor& tokens);
  void apply_conditional_backward(size_t blocks_run, Tensor& dtokens);

  ModelConfig cfg_;
  const VitArch& arch_;  // cfg_'s
  Param patch_w_, patch_b_, cls_, dist_, reg_;
  std::unique_ptr<TokenEncoding> token_enc_;
  std::unique_ptr<ConditionalEncoding> cond_enc_;
  std::vector<TransformerBlock> blocks_;
  LayerNormLayer norm_;  // "norm" (class-token pooling) or "fc_norm" (mean pooling)
  LinearLayer head_;
  LinearLayer head_dist_;  // DeiT distilled only

  // activations of the last forward
  Grid grid_;
  Tensor images_, patches_, tokens_, pooled_, normed_, logits_, logits_dist_;
  std::vector<Tensor> outs_;
  // gradients
  Tensor d_normed_, d_pooled_, d_a_, d_b_, d_patches_, d_half_;
};

}  // namespace vitpe
