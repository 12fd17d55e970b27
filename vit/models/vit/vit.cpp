#include "vit/models/vit/vit.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <tuple>

namespace vitpe {

VisionTransformer::VisionTransformer(const ModelConfig& config, uint64_t seed)
    : cfg_(config), arch_(cfg_.vit()) {
  cfg_.validate();
  Rng rng(seed), enc_rng = encoding_rng(seed);
  const int64_t D = arch_.dim, C = cfg_.channels, p = cfg_.patch;
  const EncodingSpec& spec = cfg_.encoding;

  std::tie(patch_w_, patch_b_) = make_patch_embed_params(D, C, p, rng);
  if (arch_.norm_pre) patch_b_ = Param();  // timm's pre_norm: the patch embedding has no bias
  if (arch_.class_token) {
    Tensor cls = Tensor::empty({1, 1, D});
    rng.fill_normal(cls, 1e-6);  // timm
    cls_ = make_param("cls_token", cls, true);
  }
  if (arch_.dist_token) {
    Tensor dist = Tensor::empty({1, 1, D});
    rng.fill_normal(dist, 0.02);  // timm's trunc_normal_(std=.02), untruncated
    dist_ = make_param("dist_token", dist, true);
  }
  if (arch_.reg_tokens) {
    Tensor reg = Tensor::empty({1, arch_.reg_tokens, D});
    rng.fill_normal(reg, 1e-6);  // timm
    reg_ = make_param("reg_token", reg, true);
  }
  const Grid grid = cfg_.patch_grid();
  // no_embed_class: the token encoding sees the patch tokens only (timm adds pos_embed before
  // prepending the class token).
  token_enc_ = make_token_encoding(spec, D, grid, arch_.no_embed_class ? 0 : prefix(), enc_rng);
  cond_enc_ = make_conditional_encoding(spec, D, grid, prefix(), enc_rng);
  if (cond_enc_ && cond_enc_->after_block() > arch_.depth) {
    throw std::invalid_argument(
        cond_enc_->kind() + ": option after=" + std::to_string(cond_enc_->after_block()) +
        " is past the last block of this ViT (depth " + std::to_string(arch_.depth) +
        "); accepted: after=0.." + std::to_string(arch_.depth));
  }
  if (arch_.norm_pre) norm_pre_ = LayerNormLayer("norm_pre", D, arch_.eps);
  const int64_t hd = D / arch_.heads;
  for (int64_t i = 0; i < arch_.depth; ++i) {
    blocks_.emplace_back("blocks." + std::to_string(i), D, arch_.heads, arch_.mlp_dim, arch_.eps,
                         make_attention_encoding(spec, arch_.heads, hd, grid, prefix(), enc_rng),
                         rng, arch_.layer_scale, BlockStyle::pre_norm,
                         MlpStyle{arch_.mlp, arch_.mlp_norm, arch_.eps}, arch_.qkv_bias);
  }
  const bool fc_norm = arch_.pool == Pool::avg && !arch_.norm_before_pool;
  norm_ = LayerNormLayer(fc_norm ? "fc_norm" : "norm", D, arch_.eps);
  if (arch_.pool == Pool::map) {
    attn_pool_ = AttentionPoolLayer("attn_pool", D, arch_.heads, arch_.mlp_dim, arch_.eps, rng);
  }
  if (cfg_.classes > 0) {
    head_ = LinearLayer("head", D, cfg_.classes, true, rng);
    if (arch_.dist_token) head_dist_ = LinearLayer("head_dist", D, cfg_.classes, true, rng);
  }
  outs_.resize(blocks_.size());
}

void VisionTransformer::collect_linears(std::vector<LinearLayer*>& out) {
  for (auto& b : blocks_) b.collect_linears(out);
  if (arch_.pool == Pool::map) attn_pool_.collect_linears(out);
  if (cfg_.classes == 0) return;
  out.push_back(&head_);
  if (arch_.dist_token) out.push_back(&head_dist_);
}

std::vector<Param*> VisionTransformer::prefix_params() {
  std::vector<Param*> out;
  if (arch_.class_token) out.push_back(&cls_);
  if (arch_.dist_token) out.push_back(&dist_);
  if (arch_.reg_tokens) out.push_back(&reg_);
  return out;
}

std::vector<std::pair<Param*, int64_t>> VisionTransformer::layered_params() {
  std::vector<std::pair<Param*, int64_t>> out;
  auto add = [&out](const std::vector<Param*>& ps, int64_t layer) {
    for (Param* p : ps) out.emplace_back(p, layer);
  };
  std::vector<Param*> ps;
  add(prefix_params(), 0);
  if (token_enc_) add(token_enc_->params(), 0);
  if (cond_enc_) add(cond_enc_->params(), cond_enc_->after_block());
  out.emplace_back(&patch_w_, 0);
  if (!arch_.norm_pre) out.emplace_back(&patch_b_, 0);
  if (arch_.norm_pre) norm_pre_.collect(ps);
  add(ps, 0);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    ps.clear();
    blocks_[i].collect(ps);
    add(ps, static_cast<int64_t>(i) + 1);
  }
  const int64_t top = arch_.depth + 1;
  ps.clear();
  norm_.collect(ps);
  if (arch_.pool == Pool::map) attn_pool_.collect(ps);
  add(ps, top);
  add(head_params(), top);
  return out;
}

std::vector<Param*> VisionTransformer::head_params() {
  std::vector<Param*> out;
  if (cfg_.classes == 0) return out;
  head_.collect(out);
  if (arch_.dist_token) head_dist_.collect(out);
  return out;
}

Model::EncodingParts VisionTransformer::encoding_parts() {
  EncodingParts parts;
  parts.token = token_enc_.get();
  parts.conditional = cond_enc_.get();
  for (auto& b : blocks_) parts.attention.push_back(b.attention().encoding());
  return parts;
}

Model::AttentionMaps VisionTransformer::attention_maps() {
  AttentionMaps maps;
  maps.prefix = prefix();
  maps.grid = grid_;
  for (auto& b : blocks_) {
    if (!b.attention().probs().defined()) return {};
    maps.probs.push_back(&b.attention().probs());
  }
  return maps;
}

const Tensor& VisionTransformer::encode(const Tensor& images, bool training) {
  grid_ = check_images("VisionTransformer::forward", images, cfg_);
  const int64_t B = images.size(0), D = arch_.dim, P = prefix();
  const int64_t Np = grid_.count(), N = P + Np;
  if (training) images_ = images;

  ensure_shape(patches_, {B, Np, D});
  patch_embed_forward(patches_, images, patch_w_.value, patch_b_.value);  // [B, Np, D]
  if (token_enc_ && arch_.no_embed_class) token_enc_->forward(patches_, grid_);
  ensure_shape(tokens_, {B, N, D});
  const std::vector<Param*> prefix_tokens = prefix_params();
  for (int64_t b = 0; b < B; ++b) {
    float* dst = tokens_.f32() + b * N * D;
    for (const Param* p : prefix_tokens) {  // class, distillation, registers, in order
      std::memcpy(dst, p->value.f32(), p->value.numel() * sizeof(float));
      dst += p->value.numel();
    }
    std::memcpy(dst, patches_.f32() + b * Np * D, Np * D * sizeof(float));
  }
  if (token_enc_ && !arch_.no_embed_class) token_enc_->forward(tokens_, grid_);  // [B, N, D]

  const AttnGeometry geom{grid_, P};
  const Tensor no_mask;
  Tensor* x = &tokens_;
  if (arch_.norm_pre) {
    norm_pre_.forward(pre_normed_, tokens_, training);  // CLIP: [B, N, D]
    x = &pre_normed_;
  }
  apply_conditional(0, *x);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i].forward(outs_[i], *x, geom, no_mask, training);
    x = &outs_[i];
    apply_conditional(i + 1, *x);
  }
  return *x;
}

const Tensor& VisionTransformer::forward(const Tensor& images, bool training) {
  return pool_and_head(encode(images, training), training, /*all_tokens=*/false);
}

Model::Features VisionTransformer::forward_features(const Tensor& images) {
  const Tensor& x = encode(images, false);
  const Tensor& out = pool_and_head(x, false, /*all_tokens=*/true);
  Features f;
  const bool fc_norm = arch_.pool == Pool::avg && !arch_.norm_before_pool;
  f.tokens = fc_norm ? &x : &tokens_normed_;  // timm: norm is identity when fc_norm follows
  f.prefix = prefix();
  f.grid = grid_;
  f.pooled = &pre_logits();
  f.logits = &out;
  return f;
}

const Tensor& VisionTransformer::pre_logits() const {
  if (arch_.dist_token) return dist_mean_;  // the two tokens' mean, made by forward_distilled
  if (arch_.pool == Pool::map || arch_.norm_before_pool) return pooled_;
  return normed_;
}

const Tensor& VisionTransformer::pool_and_head(const Tensor& x, bool training, bool all_tokens) {
  if (arch_.dist_token) return forward_distilled(x, training, all_tokens);
  const int64_t B = x.size(0), N = x.size(1), D = arch_.dim, P = prefix();
  // Pooling of normalised tokens (the attention pool, DINOv3's mean) normalises them all; the
  // class token alone otherwise, unless the caller wants every token.
  const bool tokens_first = arch_.pool == Pool::map || arch_.norm_before_pool;
  if (tokens_first || (all_tokens && arch_.pool == Pool::cls)) {
    norm_.forward(tokens_normed_, x, training && tokens_first);  // [B, N, D]
  }
  ensure_shape(pooled_, {B, D});
  if (arch_.pool == Pool::map) {
    attn_pool_.forward(pooled_, tokens_normed_, training);
  } else if (arch_.pool == Pool::avg && arch_.norm_before_pool) {
    mean_tokens_forward(pooled_, tokens_normed_, P);
  } else {
    if (arch_.pool == Pool::cls) {
      // LayerNorm is per token, so normalising only the class token equals timm's
      // norm-then-pool.
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(pooled_.f32() + b * D, x.f32() + b * N * D, D * sizeof(float));
    } else {
      mean_tokens_forward(pooled_, x, P);
    }
    norm_.forward(normed_, pooled_, training);
  }
  if (cfg_.classes == 0) return pre_logits();
  head_.forward(logits_, pre_logits(), training);  // [B, classes]
  return logits_;
}

// DeiT distilled: the class and distillation tokens ([2, B, D]: token t of image b at t * B + b),
// normalised, through head and head_dist; the logits are their mean (the pre-logits too, timm's
// forward_head(pre_logits=True), kept in dist_mean_ when asked for).
const Tensor& VisionTransformer::forward_distilled(const Tensor& x, bool training,
                                                   bool all_tokens) {
  const int64_t B = x.size(0), N = x.size(1), D = arch_.dim;
  ensure_shape(pooled_, {2, B, D});
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(pooled_.f32() + (t * B + b) * D, x.f32() + (b * N + t) * D, D * sizeof(float));
    }
  }
  norm_.forward(normed_, pooled_, training);
  if (all_tokens || cfg_.classes == 0) {
    if (all_tokens) norm_.forward(tokens_normed_, x, false);
    ensure_shape(dist_mean_, {B, D});
    const float* n = normed_.f32();
    for (int64_t i = 0; i < B * D; ++i) dist_mean_.f32()[i] = 0.5f * (n[i] + n[B * D + i]);
  }
  if (cfg_.classes == 0) return dist_mean_;
  head_.forward(logits_, normed_.slice(0, 1).reshape({B, D}), training);
  head_dist_.forward(logits_dist_, normed_.slice(1, 2).reshape({B, D}), training);
  float* l = logits_.f32();
  const float* ld = logits_dist_.f32();
  for (int64_t i = 0; i < logits_.numel(); ++i) l[i] = 0.5f * (l[i] + ld[i]);
  return logits_;
}

void VisionTransformer::backward(const Tensor& dlogits) {
  const Tensor& out = cfg_.classes > 0 ? logits_ : pre_logits();
  check_shape("VisionTransformer::backward", "dlogits", dlogits, out.shape());
  const int64_t B = out.size(0), D = arch_.dim, P = prefix();
  const int64_t Np = grid_.count(), N = P + Np;
  ensure_grads();
  const BackwardScope& scope = backward_scope();
  if (scope.head_only) {
    head_backward_only(dlogits);
    return;
  }

  ensure_shape(d_a_, {B, N, D});
  ensure_shape(d_b_, {B, N, D});
  d_a_.zero();
  if (arch_.dist_token) {
    // Each head got half of the logits' gradient (without heads: each token half of the mean's).
    ensure_shape(d_half_, dlogits.shape());
    for (int64_t i = 0; i < dlogits.numel(); ++i) d_half_.f32()[i] = 0.5f * dlogits.f32()[i];
    ensure_shape(d_normed_, {2, B, D});
    d_normed_.zero();
    Tensor d_cls = d_normed_.slice(0, 1).reshape({B, D});
    Tensor d_dist = d_normed_.slice(1, 2).reshape({B, D});
    if (cfg_.classes > 0) {
      head_.backward(d_cls, d_half_);
      head_dist_.backward(d_dist, d_half_);
    } else {
      d_cls.copy_from(d_half_);
      d_dist.copy_from(d_half_);
    }
    ensure_shape(d_pooled_, {2, B, D});
    d_pooled_.zero();
    norm_.backward(d_pooled_, d_normed_);
    for (int64_t t = 0; t < 2; ++t) {
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(d_a_.f32() + (b * N + t) * D, d_pooled_.f32() + (t * B + b) * D,
                    D * sizeof(float));
      }
    }
  } else if (arch_.pool == Pool::map || arch_.norm_before_pool) {
    // The pooled vector is the pre-logits: its gradient back through the pooling, then through
    // the norm over every token.
    ensure_shape(d_pooled_, {B, D});
    if (cfg_.classes > 0) {
      d_pooled_.zero();
      head_.backward(d_pooled_, dlogits);
    } else {
      d_pooled_.copy_from(dlogits);
    }
    ensure_shape(d_tokens_normed_, {B, N, D});
    if (arch_.pool == Pool::map) {
      attn_pool_.backward(d_tokens_normed_, d_pooled_);  // overwrites
    } else {
      d_tokens_normed_.zero();
      mean_tokens_backward(d_tokens_normed_, d_pooled_, P);
    }
    norm_.backward(d_a_, d_tokens_normed_);
  } else {
    ensure_shape(d_normed_, {B, D});
    if (cfg_.classes > 0) {
      d_normed_.zero();
      head_.backward(d_normed_, dlogits);
    } else {
      d_normed_.copy_from(dlogits);
    }
    ensure_shape(d_pooled_, {B, D});
    d_pooled_.zero();
    norm_.backward(d_pooled_, d_normed_);
    if (arch_.pool == Pool::cls) {
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(d_a_.f32() + b * N * D, d_pooled_.f32() + b * D, D * sizeof(float));
    } else {
      mean_tokens_backward(d_a_, d_pooled_, P);
    }
  }
  // Frozen layers (the backward scope): the pass stops where every layer below is frozen. Layer
  // i is what lies below block i (block i - 1, a conditional encoding after i blocks, and for
  // i = 0 the embeddings).
  const int64_t from = scope.from_layer;
  if (from > arch_.depth) return;
  Tensor* dy = &d_a_;
  Tensor* dx = &d_b_;
  apply_conditional_backward(blocks_.size(), *dy);
  for (size_t i = blocks_.size(); i-- > 0;) {
    blocks_[i].backward(*dx, *dy);  // overwrites dx
    std::swap(dx, dy);
    if (from > static_cast<int64_t>(i)) return;
    apply_conditional_backward(i, *dy);
  }
  if (arch_.norm_pre) {
    // dy: the gradient of norm_pre's output; back to the encoded tokens.
    dx->zero();
    norm_pre_.backward(*dx, *dy);
    std::swap(dx, dy);
  }
  // dy: gradient of the encoded tokens
  if (token_enc_ && !arch_.no_embed_class) token_enc_->backward(*dy, grid_);
  ensure_shape(d_patches_, {B, Np, D});
  const std::vector<Param*> prefix_tokens = prefix_params();
  for (int64_t b = 0; b < B; ++b) {
    const float* src = dy->f32() + b * N * D;
    const float* s = src;
    for (Param* p : prefix_tokens) {
      float* g = p->grad.f32();
      for (int64_t i = 0; i < p->value.numel(); ++i) g[i] += s[i];
      s += p->value.numel();
    }
    std::memcpy(d_patches_.f32() + b * Np * D, src + P * D, Np * D * sizeof(float));
  }
  if (token_enc_ && arch_.no_embed_class) token_enc_->backward(d_patches_, grid_);
  Tensor no_dx;
  patch_embed_backward(no_dx, patch_w_.grad, patch_b_.grad, d_patches_, images_, patch_w_.value);
}

void VisionTransformer::head_backward_only(const Tensor& dlogits) {
  if (cfg_.classes == 0) return;
  Tensor no_dx;  // undefined: the pre-logits' gradient is not needed
  if (arch_.dist_token) {
    ensure_shape(d_half_, dlogits.shape());
    for (int64_t i = 0; i < dlogits.numel(); ++i) d_half_.f32()[i] = 0.5f * dlogits.f32()[i];
    head_.backward(no_dx, d_half_);
    head_dist_.backward(no_dx, d_half_);
  } else {
    head_.backward(no_dx, dlogits);
  }
}

void VisionTransformer::apply_conditional(size_t blocks_run, Tensor& tokens) {
  if (cond_enc_ && static_cast<size_t>(cond_enc_->after_block()) == blocks_run)
    cond_enc_->forward(tokens, grid_);  // [B, N, D], in place
}

void VisionTransformer::apply_conditional_backward(size_t blocks_run, Tensor& dtokens) {
  if (cond_enc_ && static_cast<size_t>(cond_enc_->after_block()) == blocks_run)
    cond_enc_->backward(dtokens, grid_);  // [B, N, D], in place
}

double VisionTransformer::flops_per_image() const {
  const double D = arch_.dim, Np = cfg_.patch_grid().count(), N = Np + prefix();
  const double pe = 2.0 * Np * D * cfg_.channels * cfg_.patch * cfg_.patch;
  const double block = 2.0 * N * D * 3 * D + 4.0 * N * N * D + 2.0 * N * D * D +
                       (arch_.mlp == Mlp::swiglu ? 6.0 : 4.0) * N * D * arch_.mlp_dim +
                       (arch_.layer_scale > 0 ? 4.0 * N * D : 0.0);
  const double peg = cond_enc_ ? 2.0 * 9 * Np * D : 0.0;  // a depthwise 3x3 convolution
  // SigLIP's attention pool: the keys and values of every token, one query's attention, the
  // query, output projection and MLP of one token.
  const double pool = arch_.pool == Pool::map ? 2.0 * N * D * 2 * D + 4.0 * N * D + 4.0 * D * D +
                                                    4.0 * D * arch_.mlp_dim
                                              : 0.0;
  return pe + arch_.depth * block + peg + pool + (arch_.dist_token ? 4.0 : 2.0) * D * cfg_.classes;
}

}  // namespace vitpe
