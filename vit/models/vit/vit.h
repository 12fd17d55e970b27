// Vision Transformer (Dosovitskiy et al.; timm's VisionTransformer layout and names) with an
// interchangeable positional encoding at the input site and/or in every block.
//
// images [B, C, H, W] -> patch embed [B, Np, D] -> prepend prefix tokens -> token encoding
// -> (CLIP: norm_pre) -> blocks x depth (a conditional encoding, CPVT's PEG, after the block it
// names) -> pool -> head -> logits [B, classes]. Pooling (VitArch::pool): the class token after
// the final norm; the mean of the patch tokens, then fc_norm (timm's default) or of the normalised
// tokens (norm_before_pool: DINOv3, SigLIP gap); or SigLIP's attention pooling of the normalised
// tokens. Variants (VitArch): no_embed_class (the token encoding before the class token is
// prepended, on the patch tokens only), layer scale in every block (DeiT-III), register tokens
// after the class token (prefix tokens: class, registers, then the patches), DeiT's distillation
// token with its own head (class, distillation, patches; logits: the heads' mean), the MLP's
// activation, no qkv bias. A model with classes 0 has no head: its output is the pooled vector.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "vit/models/layers.h"
#include "vit/models/model.h"

namespace vitpe {

class VisionTransformer : public Model {
 public:
  VisionTransformer(const ModelConfig& config, uint64_t seed);

  const ModelConfig& config() const override { return cfg_; }
  const Tensor& forward(const Tensor& images, bool training = false) override;
  Features forward_features(const Tensor& images) override;
  void backward(const Tensor& dlogits) override;
  std::vector<std::pair<Param*, int64_t>> layered_params() override;
  int64_t blocks() const override { return arch_.depth; }
  std::vector<Param*> head_params() override;
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
  // A linear probe's backward: the head's weight and bias gradients from dlogits and the
  // pre-logits its forward kept, nothing else.
  void head_backward_only(const Tensor& dlogits);
  // images -> the last block's output [B, N, D].
  const Tensor& encode(const Tensor& images, bool training);
  // x: the last block's output [B, N, D] -> pooled_ / normed_ (the pre-logits) and logits_;
  // with all_tokens, also the final tokens as forward_features returns them. Returns the output.
  const Tensor& pool_and_head(const Tensor& x, bool training, bool all_tokens);
  const Tensor& forward_distilled(const Tensor& x, bool training, bool all_tokens);
  // The pre-logits vector of the last forward: what the head reads.
  const Tensor& pre_logits() const;
  // The conditional encoding's forward on the output of `blocks_run` blocks (0: their input),
  // and its backward on that output's gradient, when it sits there.
  void apply_conditional(size_t blocks_run, Tensor& tokens);
  void apply_conditional_backward(size_t blocks_run, Tensor& dtokens);

  ModelConfig cfg_;
  const VitArch& arch_;  // cfg_'s
  Param patch_w_, patch_b_, cls_, dist_, reg_;
  std::unique_ptr<TokenEncoding> token_enc_;
  std::unique_ptr<ConditionalEncoding> cond_enc_;
  LayerNormLayer norm_pre_;  // CLIP's only
  std::vector<TransformerBlock> blocks_;
  LayerNormLayer norm_;           // "norm" (over the tokens) or "fc_norm" (after mean pooling)
  AttentionPoolLayer attn_pool_;  // SigLIP's map pooling only
  LinearLayer head_;              // none with classes 0
  LinearLayer head_dist_;         // DeiT distilled only

  // activations of the last forward
  Grid grid_;
  Tensor images_, patches_, tokens_, pre_normed_, pooled_, normed_, logits_, logits_dist_;
  Tensor tokens_normed_;  // the final tokens after norm (all of them)
  Tensor dist_mean_;      // DeiT distilled: the pre-logits, the two normalised tokens' mean
  std::vector<Tensor> outs_;
  // gradients
  Tensor d_normed_, d_pooled_, d_a_, d_b_, d_patches_, d_half_, d_tokens_normed_;
};

}  // namespace vitpe
