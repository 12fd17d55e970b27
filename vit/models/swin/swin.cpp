#include "vit/models/swin/swin.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <tuple>

namespace vitpe {

// ---- block --------------------------------------------------------------------------------------

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// timm: a window axis larger than the resolution is clamped to it, and that axis is not shifted.
Grid clamp_window(Grid window, Grid res) {
  return {std::min(window.rows, res.rows), std::min(window.cols, res.cols)};
}
}  // namespace

SwinBlock::SwinBlock(const std::string& name, int64_t dim, int64_t heads, int64_t hidden, float eps,
                     Grid window, bool shifted, const EncodingSpec& spec, Rng& rng, Rng& enc_rng,
                     BlockStyle style)
    : window_(window),
      shifted_(shifted),
      block_(name, dim, heads, hidden, eps,
             make_attention_encoding(spec, heads, dim / heads, window, 0, enc_rng), rng, 0, style) {
}

const WindowLayout& SwinBlock::layout(Grid res) {
  auto key = std::make_pair(res.rows, res.cols);
  auto it = layouts_.find(key);
  if (it != layouts_.end()) return it->second;
  const Grid w = clamp_window(window_, res);
  const int64_t sr = shifted_ && res.rows > window_.rows ? window_.rows / 2 : 0;
  const int64_t sc = shifted_ && res.cols > window_.cols ? window_.cols / 2 : 0;
  return layouts_.emplace(key, make_window_layout(res, w, sr, sc)).first->second;
}

void SwinBlock::forward(Tensor& y, const Tensor& x, Grid res, bool training) {
  const WindowLayout& l = layout(res);
  block_.forward(y, x, AttnGeometry{l.window, 0}, /*mask: the layout's*/ {}, training, &l);
}

void SwinBlock::backward(Tensor& dx, const Tensor& dy) { block_.backward(dx, dy); }

// ---- patch merging ------------------------------------------------------------------------------

PatchMerging::PatchMerging(const std::string& name, int64_t dim, float eps, Rng& rng,
                           bool norm_after)
    : norm_(name + ".norm", norm_after ? 2 * dim : 4 * dim, eps),
      reduction_(name + ".reduction", 4 * dim, 2 * dim, false, rng),
      norm_after_(norm_after) {}

namespace {
// For output cell (i, j) the four inputs in timm's order (row0,col0), (row1,col0), (row0,col1),
// (row1,col1); -1 where the odd-size padding is.
inline int64_t merge_source(Grid res, int64_t i, int64_t j, int q) {
  const int64_t r = 2 * i + (q & 1), c = 2 * j + (q >> 1);
  return (r < res.rows && c < res.cols) ? r * res.cols + c : -1;
}
}  // namespace

void PatchMerging::forward(Tensor& y, const Tensor& x, Grid res, bool training) {
  const int64_t B = x.size(0), C = x.size(2);
  res_ = res;
  const int64_t Ho = ceil_div(res.rows, 2), Wo = ceil_div(res.cols, 2), L = res.count();
  ensure_shape(cat_, {B, Ho * Wo, 4 * C});
  const float* src = x.f32();
  float* dst = cat_.f32();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t o = 0; o < Ho * Wo; ++o) {
      for (int q = 0; q < 4; ++q) {
        const int64_t s = merge_source(res, o / Wo, o % Wo, q);
        float* out = dst + (b * Ho * Wo + o) * 4 * C + q * C;
        if (s < 0)
          std::memset(out, 0, C * sizeof(float));
        else
          std::memcpy(out, src + (b * L + s) * C, C * sizeof(float));
      }
    }
  }
  if (norm_after_) {
    reduction_.forward(normed_, cat_, training);
    norm_.forward(y, normed_, training);
    return;
  }
  norm_.forward(normed_, cat_, training);
  reduction_.forward(y, normed_, training);
}

void PatchMerging::backward(Tensor& dx, const Tensor& dy) {
  ensure_shape(dnormed_, normed_.shape());
  dnormed_.zero();
  ensure_shape(dcat_, cat_.shape());
  dcat_.zero();
  if (norm_after_) {
    norm_.backward(dnormed_, dy);
    reduction_.backward(dcat_, dnormed_);
  } else {
    reduction_.backward(dnormed_, dy);
    norm_.backward(dcat_, dnormed_);
  }
  const int64_t B = dx.size(0), C = dx.size(2), L = res_.count();
  const int64_t Ho = ceil_div(res_.rows, 2), Wo = ceil_div(res_.cols, 2);
  const float* src = dcat_.f32();
  float* dst = dx.f32();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t o = 0; o < Ho * Wo; ++o) {
      for (int q = 0; q < 4; ++q) {
        const int64_t s = merge_source(res_, o / Wo, o % Wo, q);
        if (s < 0) continue;
        const float* in = src + (b * Ho * Wo + o) * 4 * C + q * C;
        float* out = dst + (b * L + s) * C;
        for (int64_t c = 0; c < C; ++c) out[c] += in[c];
      }
    }
  }
}

// ---- model --------------------------------------------------------------------------------------

namespace {

// Swin has no conditional site: its stages change the grid and the channels, so where a PEG
// would go (and at which width) is a design CPVT's ViT placement does not settle.
void refuse_conditional(const EncodingSpec& spec) {
  const EncodingSpec::Part* part = spec.part(EncodingSite::conditional);
  if (!part) return;
  std::string works;
  for (const EncodingKindInfo& k : encoding_kinds()) {
    if (k.site == EncodingSite::token || k.site == EncodingSite::attention) {
      works += (works.empty() ? "" : ", ") + k.name;
    }
  }
  throw std::invalid_argument("encoding '" + spec.str() + "': '" + part->kind +
                              "' is a conditional encoding, which only ViT models take; " +
                              "Swin models take token and attention kinds (" + works + ") or none");
}

}  // namespace

SwinTransformer::SwinTransformer(const ModelConfig& config, uint64_t seed)
    : cfg_(config), arch_(cfg_.swin()) {
  cfg_.validate();
  Rng rng(seed), enc_rng = encoding_rng(seed);
  const int64_t C0 = arch_.dim, Cin = cfg_.channels, p = cfg_.patch;
  const EncodingSpec& spec = cfg_.encoding;
  refuse_conditional(spec);
  std::tie(patch_w_, patch_b_) = make_patch_embed_params(C0, Cin, p, rng);
  patch_norm_ = LayerNormLayer("patch_embed.norm", C0, arch_.eps);
  Grid res = cfg_.patch_grid();
  token_enc_ = make_token_encoding(spec, C0, res, 0, enc_rng);

  const Grid window{arch_.window, arch_.window};
  const size_t S = arch_.depths.size();
  stages_.resize(S);
  for (size_t s = 0; s < S; ++s) {
    const int64_t dim = C0 << s;
    const std::string name = "layers." + std::to_string(s);
    if (s > 0) {
      merges_.push_back(
          std::make_unique<PatchMerging>(name + ".downsample", dim / 2, arch_.eps, rng, arch_.v2));
      res = {ceil_div(res.rows, 2), ceil_div(res.cols, 2)};
    }
    const int64_t hidden = static_cast<int64_t>(dim * arch_.mlp_ratio);
    for (int64_t j = 0; j < arch_.depths[s]; ++j) {
      stages_[s].push_back(std::make_unique<SwinBlock>(
          name + ".blocks." + std::to_string(j), dim, arch_.stage_heads[s], hidden, arch_.eps,
          clamp_window(window, res), j % 2 == 1, spec, rng, enc_rng,
          arch_.v2 ? BlockStyle::swin_v2 : BlockStyle::pre_norm));
    }
  }
  norm_ = LayerNormLayer("norm", C0 << (S - 1), arch_.eps);
  if (cfg_.classes > 0) head_ = LinearLayer("head.fc", C0 << (S - 1), cfg_.classes, true, rng);
  merged_.resize(S);
  outs_.resize(S);
  for (size_t s = 0; s < S; ++s) outs_[s].resize(stages_[s].size());
  res_.resize(S);
}

void SwinTransformer::collect_linears(std::vector<LinearLayer*>& out) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    if (s > 0) merges_[s - 1]->collect_linears(out);
    for (auto& b : stages_[s]) b->collect_linears(out);
  }
  if (cfg_.classes > 0) out.push_back(&head_);
}

std::vector<std::pair<Param*, int64_t>> SwinTransformer::layered_params() {
  std::vector<std::pair<Param*, int64_t>> out;
  std::vector<Param*> ps{&patch_w_, &patch_b_};
  auto add = [&out, &ps](int64_t layer) {
    for (Param* p : ps) out.emplace_back(p, layer);
    ps.clear();
  };
  patch_norm_.collect(ps);
  if (token_enc_) {
    for (Param* p : token_enc_->params()) ps.push_back(p);
  }
  add(0);
  int64_t layer = 0;
  for (size_t s = 0; s < stages_.size(); ++s) {
    // timm: a stage's downsample is grouped with the stage's first block.
    if (s > 0) merges_[s - 1]->collect(ps);
    add(layer + 1);
    for (auto& b : stages_[s]) {
      b->collect(ps);
      add(++layer);
    }
  }
  norm_.collect(ps);
  for (Param* p : head_params()) ps.push_back(p);
  add(layer + 1);
  return out;
}

int64_t SwinTransformer::blocks() const {
  int64_t n = 0;
  for (int64_t d : arch_.depths) n += d;
  return n;
}

std::vector<Param*> SwinTransformer::head_params() {
  std::vector<Param*> out;
  if (cfg_.classes > 0) head_.collect(out);
  return out;
}

Model::EncodingParts SwinTransformer::encoding_parts() {
  EncodingParts parts;
  parts.token = token_enc_.get();
  for (auto& stage : stages_) {
    for (auto& b : stage) parts.attention.push_back(b->attention().encoding());
  }
  return parts;
}

const Tensor& SwinTransformer::forward(const Tensor& images, bool training) {
  Grid res = check_images("SwinTransformer::forward", images, cfg_);
  const int64_t B = images.size(0);
  if (training) images_ = images;
  ensure_shape(patches_, {B, res.count(), arch_.dim});
  patch_embed_forward(patches_, images, patch_w_.value, patch_b_.value);
  patch_norm_.forward(embedded_, patches_, training);
  if (token_enc_) token_enc_->forward(embedded_, res);

  const Tensor* x = &embedded_;
  for (size_t s = 0; s < stages_.size(); ++s) {
    if (s > 0) {
      merges_[s - 1]->forward(merged_[s], *x, res, training);
      res = {ceil_div(res.rows, 2), ceil_div(res.cols, 2)};
      x = &merged_[s];
    }
    res_[s] = res;
    for (size_t j = 0; j < stages_[s].size(); ++j) {
      stages_[s][j]->forward(outs_[s][j], *x, res, training);
      x = &outs_[s][j];
    }
  }
  norm_.forward(normed_, *x, training);
  ensure_shape(pooled_, {B, normed_.size(2)});
  mean_tokens_forward(pooled_, normed_, 0);
  if (cfg_.classes == 0) return pooled_;
  head_.forward(logits_, pooled_, training);
  return logits_;
}

Model::Features SwinTransformer::forward_features(const Tensor& images) {
  Features f;
  f.logits = &forward(images, false);
  f.tokens = &normed_;  // timm's forward_features: the last stage after the norm
  f.grid = res_.back();
  f.pooled = &pooled_;
  return f;
}

void SwinTransformer::backward(const Tensor& dlogits) {
  check_shape("SwinTransformer::backward", "dlogits", dlogits,
              cfg_.classes > 0 ? logits_.shape() : pooled_.shape());
  ensure_grads();
  const BackwardScope& scope = backward_scope();
  if (scope.head_only) {
    Tensor no_dx;  // a linear probe: the head's gradients alone, from the pooled vector kept
    if (cfg_.classes > 0) head_.backward(no_dx, dlogits);
    return;
  }
  ensure_shape(d_pooled_, pooled_.shape());
  if (cfg_.classes > 0) {
    d_pooled_.zero();
    head_.backward(d_pooled_, dlogits);
  } else {
    d_pooled_.copy_from(dlogits);
  }
  ensure_shape(d_normed_, normed_.shape());
  d_normed_.zero();
  mean_tokens_backward(d_normed_, d_pooled_, 0);
  ensure_shape(d_a_, normed_.shape());
  d_a_.zero();
  norm_.backward(d_a_, d_normed_);

  // Frozen layers (the backward scope): the pass stops at the first frozen block. A stage's
  // patch merging shares the layer of its first block, so it runs whenever that block does.
  const int64_t from = scope.from_layer;
  int64_t layer = blocks();  // the layer of the block below
  Tensor* dy = &d_a_;
  Tensor* dx = &d_b_;
  for (size_t s = stages_.size(); s-- > 0;) {
    for (size_t j = stages_[s].size(); j-- > 0; --layer) {
      if (from > layer) return;
      ensure_shape(*dx, dy->shape());
      stages_[s][j]->backward(*dx, *dy);  // overwrites dx
      std::swap(dx, dy);
    }
    if (s > 0) {
      // Gradient of the previous stage's output: [B, L of stage s-1, C of stage s-1].
      ensure_shape(*dx, {dy->size(0), res_[s - 1].count(), arch_.dim << (s - 1)});
      dx->zero();
      merges_[s - 1]->backward(*dx, *dy);
      std::swap(dx, dy);
    }
  }
  if (from > 0) return;
  // dy: gradient of the embedded tokens
  const Grid grid{images_.size(2) / cfg_.patch, images_.size(3) / cfg_.patch};
  if (token_enc_) token_enc_->backward(*dy, grid);
  ensure_shape(d_patches_, patches_.shape());
  d_patches_.zero();
  patch_norm_.backward(d_patches_, *dy);
  Tensor no_dx;
  patch_embed_backward(no_dx, patch_w_.grad, patch_b_.grad, d_patches_, images_, patch_w_.value);
}

double SwinTransformer::flops_per_image() const {
  const double p = cfg_.patch;
  Grid res = cfg_.patch_grid();
  double flops = 2.0 * res.count() * arch_.dim * cfg_.channels * p * p;
  for (size_t s = 0; s < arch_.depths.size(); ++s) {
    const double C = static_cast<double>(arch_.dim << s);
    if (s > 0) {
      res = {ceil_div(res.rows, 2), ceil_div(res.cols, 2)};
      flops += 2.0 * res.count() * 4 * (C / 2) * C;
    }
    const Grid w = clamp_window({arch_.window, arch_.window}, res);
    const double L = static_cast<double>(ceil_div(res.rows, w.rows) * w.rows *
                                         ceil_div(res.cols, w.cols) * w.cols);
    const double per_block = 2.0 * L * C * 3 * C + 4.0 * L * w.count() * C + 2.0 * L * C * C +
                             4.0 * L * C * C * arch_.mlp_ratio;
    flops += arch_.depths[s] * per_block;
  }
  const double Cl = static_cast<double>(arch_.dim << (arch_.depths.size() - 1));
  return flops + 2.0 * Cl * cfg_.classes;
}

}  // namespace vitpe
