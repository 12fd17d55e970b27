#include "vit/models/layers.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace vitpe {

void ensure_shape(Tensor& t, const Shape& shape) {
  if (t.defined() && t.shape() == shape) return;
  if (t.defined() && t.numel() == shape.numel()) {
    t = t.reshape(shape);
    return;
  }
  t = Tensor::empty(shape);
}

Param make_param(std::string name, Tensor value, bool no_decay) {
  Param p;
  p.name = std::move(name);
  p.value = std::move(value);  // the gradient comes with Model::zero_grad: inference needs none
  p.no_decay = no_decay;
  return p;
}

std::pair<Param, Param> make_patch_embed_params(int64_t dim, int64_t channels, int64_t patch,
                                                Rng& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(channels * patch * patch));
  Tensor w = Tensor::empty({dim, channels, patch, patch}), b = Tensor::empty({dim});
  rng.fill_uniform(w, -bound, bound);
  rng.fill_uniform(b, -bound, bound);
  return {make_param("patch_embed.proj.weight", w, false),
          make_param("patch_embed.proj.bias", b, true)};
}

Grid check_images(const char* op, const Tensor& images, const ModelConfig& c) {
  check_cpu_f32(op, "images", images);
  if (images.ndim() != 4 || images.size(1) != c.channels) {
    throw ShapeError(std::string(op) + ": expected images [B, " + std::to_string(c.channels) +
                     ", H, W], found " + images.shape().str());
  }
  const int64_t H = images.size(2), W = images.size(3), p = c.patch;
  if (H % p || W % p || H == 0 || W == 0) {
    throw ShapeError(std::string(op) + ": image size " + std::to_string(H) + "x" +
                     std::to_string(W) + " is not a multiple of the patch size " +
                     std::to_string(p) + " (configured size " + std::to_string(c.img_rows) + "x" +
                     std::to_string(c.img_cols) + ")");
  }
  return {H / p, W / p};
}

// ---- LayerNorm ----------------------------------------------------------------------------------

LayerNormLayer::LayerNormLayer(const std::string& name, int64_t dim, float eps) : eps_(eps) {
  w_ = make_param(name + ".weight", Tensor::full({dim}, 1.0f), true);
  b_ = make_param(name + ".bias", Tensor::zeros({dim}), true);
}

void LayerNormLayer::forward(Tensor& y, const Tensor& x, bool training) {
  ensure_shape(y, x.shape());
  if (training) {
    int64_t rows = x.numel() / x.size(-1);
    ensure_shape(mean_, {rows});
    ensure_shape(rstd_, {rows});
    x_ = x;
    layernorm_forward(y, mean_, rstd_, x, w_.value, b_.value, eps_);
  } else {
    Tensor none_mean, none_rstd;
    layernorm_forward(y, none_mean, none_rstd, x, w_.value, b_.value, eps_);
  }
}

void LayerNormLayer::backward(Tensor& dx, const Tensor& dy, const Tensor& residual) {
  layernorm_backward(dx, w_.grad, b_.grad, dy, x_, w_.value, mean_, rstd_, residual);
}

// ---- Linear -------------------------------------------------------------------------------------

LinearLayer::LinearLayer(const std::string& name, int64_t in, int64_t out, bool bias, Rng& rng) {
  Tensor w = Tensor::empty({out, in});
  rng.fill_trunc_normal(w, 0.02);
  w_ = make_param(name + ".weight", w, false);
  if (bias) b_ = make_param(name + ".bias", Tensor::zeros({out}), true);
}

void LinearLayer::forward(Tensor& y, const Tensor& x, bool training, Act act,
                          const Tensor& residual, const Tensor& scale) {
  ensure_shape(y, x.shape().with_last(out()));
  if (training && scale.defined()) {
    throw std::logic_error(w_.name + ": a scale in the epilogue is for inference only");
  }
  if (precision_ == Precision::f32) {
    if (training) {
      x_ = x;
      w_packed_ = PackedWeights();  // training changes the weights: the packed copy goes
    }
    // The packed copy is of these weights while the layer holds the same storage.
    if (w_packed_.packed() && w_packed_.plain.raw() == w_.value.raw()) {
      linear_forward(y, x, w_packed_, b_.value, act, residual, scale);
    } else {
      linear_forward(y, x, w_.value, b_.value, act, residual, scale);
    }
    return;
  }
  if (training) {
    throw std::logic_error(std::string("training runs in f32, but ") + w_.name + " is set to " +
                           precision_name(precision_) + ": call set_precision(Precision::f32)");
  }
  if (precision_ == Precision::bf16) {
    linear_forward(y, x, w_low_, b_.value, act, residual, scale);  // oneDNN converts x to bf16
    return;
  }
  if (precision_ == Precision::int8) {
    linear_int8_forward(y, x, w_int8_, b_.value, act, residual, scale);  // x quantised per token
    return;
  }
  // bf16-emulated: round the input as oneDNN's bf16 matmul would, then multiply in f32.
  ensure_shape(x_low_, x.shape());
  const float* src = x.f32();
  float* dst = x_low_.f32();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(float_to_bf16(src[i]));
  linear_forward(y, x_low_, w_low_, b_.value, act, residual, scale);
}

void LinearLayer::set_precision(Precision p, bool pack) {
  // The new weights first: a weight that cannot be converted leaves the layer as it was.
  Tensor low;
  Int8Weights int8;
  PackedWeights packed;
  switch (p) {
    case Precision::f32:
      if (pack) packed = pack_weights(w_.value);
      break;
    case Precision::bf16:
      low = w_.value.to(DType::bf16);
      break;
    case Precision::bf16_emulated:
      low = w_.value.to(DType::bf16).to(DType::f32);
      break;
    case Precision::int8:
      try {
        int8 = quantize_weights_int8(w_.value);
      } catch (const std::exception& e) {
        throw std::invalid_argument(w_.name + ": " + e.what());
      }
      break;
  }
  precision_ = p;
  x_low_ = Tensor();
  w_low_ = std::move(low);
  w_int8_ = std::move(int8);
  w_packed_ = std::move(packed);
}

void LinearLayer::share_precision(const LinearLayer& from) {
  if (from.w_.value.shape() != w_.value.shape()) {
    throw std::logic_error("share_precision: " + from.w_.name + " is " +
                           from.w_.value.shape().str() + ", " + w_.name + " " +
                           w_.value.shape().str());
  }
  precision_ = from.precision_;
  x_low_ = Tensor();
  w_low_ = from.w_low_;
  w_int8_ = from.w_int8_;
  w_packed_ = from.w_packed_;
}

int64_t LinearLayer::converted_bytes() const {
  int64_t bytes = 0;
  if (w_low_.defined()) bytes += static_cast<int64_t>(w_low_.nbytes());
  if (w_packed_.packed()) bytes += static_cast<int64_t>(w_packed_.data.nbytes());
  if (w_int8_.defined()) {
    bytes += static_cast<int64_t>(w_int8_.q.size() + sizeof(float) * w_int8_.scale.size() +
                                  sizeof(int32_t) * w_int8_.sum.size());
  }
  return bytes;
}

void LinearLayer::forward_gelu_with_derivative(Tensor& y, Tensor& dydx, const Tensor& x) {
  if (precision_ != Precision::f32) {
    throw std::logic_error(std::string("training runs in f32, but ") + w_.name + " is set to " +
                           precision_name(precision_) + ": call set_precision(Precision::f32)");
  }
  const Shape out = x.shape().with_last(this->out());
  ensure_shape(y, out);
  ensure_shape(dydx, out);
  x_ = x;
  w_packed_ = PackedWeights();  // training changes the weights: the packed copy goes
  linear_gelu_forward_with_derivative(y, dydx, x, w_.value, b_.value);
}

void LinearLayer::backward(Tensor& dx, const Tensor& dy, bool overwrite_dx, bool bias_grad_added) {
  Tensor no_db;
  linear_backward(dx, w_.grad, bias_grad_added ? no_db : b_.grad, dy, x_, w_.value,
                  overwrite_dx ? GradWrite::overwrite : GradWrite::accumulate);
}

// ---- Attention ----------------------------------------------------------------------------------

namespace {
const float kMaxLogitScale = static_cast<float>(std::log(100.0));  // timm's clamp, log(1 / 0.01)
}  // namespace

AttentionLayer::AttentionLayer(const std::string& name, int64_t dim, int64_t heads,
                               std::unique_ptr<AttentionEncoding> encoding, Rng& rng, bool cosine,
                               bool qkv_bias)
    : dim_(dim),
      heads_(heads),
      qkv_(name + ".qkv", dim, 3 * dim, qkv_bias, rng),
      proj_(name + ".proj", dim, dim, true, rng),
      encoding_(std::move(encoding)) {
  if (cosine) {
    logit_scale_ =
        make_param(name + ".logit_scale",
                   Tensor::full({heads, 1, 1}, static_cast<float>(std::log(10.0))), true);
  }
  // Encoding parameters are named relative to their block ("attn.relative_position_bias_table"):
  // give them the block's prefix ("blocks.3." or "layers.1.blocks.0.").
  if (encoding_) {
    const std::string block = name.substr(0, name.rfind('.') + 1);
    for (Param* p : encoding_->params()) p->name = block + p->name;
  }
}

void AttentionLayer::collect(std::vector<Param*>& out) {
  if (logit_scale_.value.defined()) out.push_back(&logit_scale_);  // timm's order: first
  qkv_.collect(out);
  proj_.collect(out);
  if (encoding_) {
    for (Param* p : encoding_->params()) out.push_back(p);
  }
}

const Tensor& AttentionLayer::encoding_bias(const AttnGeometry& geom, bool training) {
  const int64_t N = geom.tokens();
  ensure_shape(bias_, {heads_, N, N});
  // The parameters are compared through the pointers taken when the bias was made (the
  // encoding's own, fixed for its life): asking the encoding for them allocates a list per call.
  const auto made_from_these = [&] {
    if (!bias_kept_ || bias_geom_.window != geom.window || bias_geom_.prefix != geom.prefix ||
        bias_policy_ != encoding_->extension_policy() ||
        bias_augmentation_ != encoding_->augmentation())
      return false;
    size_t at = 0;
    for (const Param* p : bias_params_) {
      const auto count = static_cast<size_t>(p->value.numel());
      if (count == 0) continue;
      if (at + count > bias_from_.size() ||
          std::memcmp(bias_from_.data() + at, p->value.f32(), count * sizeof(float)) != 0)
        return false;
      at += count;
    }
    return at == bias_from_.size();
  };
  if (!training && made_from_these()) return bias_;
  encoding_->bias(bias_, geom);
  bias_kept_ = !training;
  bias_from_.clear();
  if (bias_kept_) {
    bias_geom_ = geom;
    bias_policy_ = encoding_->extension_policy();
    bias_augmentation_ = encoding_->augmentation();
    const std::vector<Param*> params = encoding_->params();
    bias_params_.assign(params.begin(), params.end());
    for (const Param* p : bias_params_)
      if (p->value.numel() > 0)
        bias_from_.insert(bias_from_.end(), p->value.f32(), p->value.f32() + p->value.numel());
  }
  return bias_;
}

void AttentionLayer::forward(Tensor& y, const Tensor& x, const AttnGeometry& geom,
                             const Tensor& mask, bool training, const Tensor& residual,
                             const Tensor& out_scale) {
  const int64_t B = x.size(0), N = x.size(1), hd = dim_ / heads_;
  if (N != geom.tokens()) {
    throw ShapeError("attention: expected " + std::to_string(geom.tokens()) + " tokens (" +
                     std::to_string(geom.prefix) + " prefix + window " + geom.window.str() +
                     "), found " + std::to_string(N));
  }
  geom_ = geom;
  qkv_.forward(qkv_out_, x, training);  // [B, N, 3D]
  const bool rotation = encoding_ && encoding_->has_rotation();
  // Every kind takes the same path at inference, rotary ones included, so that a comparison's
  // cost column measures the encoding and not a layout; training keeps the unrotated q and k of
  // the rotary kinds (their backward needs them) in the split layout.
  tokens_layout_ = !logit_scale_.value.defined() && (!rotation || !training);
  if (tokens_layout_) {
    // q and k as the projection made them (turned in place by a rotary encoding): attention
    // reads the heads straight from qkv's rows and writes the tokens' rows, with no copies
    // between the layouts (and the backward the same way back).
    if (rotation) encoding_->rotate_qkv_rows(qkv_out_, heads_, geom);
    Tensor bias;
    if (encoding_ && encoding_->has_bias()) bias = encoding_bias(geom, training);
    ensure_shape(merged_, {B, N, dim_});
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    if (training) {
      ensure_shape(probs_, {B, heads_, N, N});
      attention_forward_tokens(merged_, probs_, qkv_out_, heads_, scale, bias, mask);
    } else {
      attention_forward_tokens(merged_, qkv_out_, heads_, scale, bias, mask);
    }
    proj_.forward(y, merged_, training, Act::none, residual, out_scale);
    return;
  }
  ensure_shape(q_, {B, heads_, N, hd});
  ensure_shape(k_, {B, heads_, N, hd});
  ensure_shape(v_, {B, heads_, N, hd});
  split_heads_forward(q_, k_, v_, qkv_out_, heads_);

  const Tensor* qa = &q_;
  const Tensor* ka = &k_;
  if (rotation) {
    ensure_shape(q_rot_, q_.shape());
    ensure_shape(k_rot_, k_.shape());
    encoding_->rotate(q_rot_, k_rot_, q_, k_, geom);
    qa = &q_rot_;
    ka = &k_rot_;
  }
  Tensor bias;
  if (encoding_ && encoding_->has_bias()) bias = encoding_bias(geom, training);
  float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (logit_scale_.value.defined()) {
    ensure_shape(qn_, q_.shape());
    ensure_shape(kn_, k_.shape());
    cosine_qk_forward(qn_, kn_, *qa, *ka, logit_scale_.value, kMaxLogitScale);
    qa = &qn_;
    ka = &kn_;
    scale = 1.0f;  // the temperature is in qn
  }
  ensure_shape(o_, {B, heads_, N, hd});
  if (training) {
    ensure_shape(probs_, {B, heads_, N, N});
    attention_forward(o_, probs_, *qa, *ka, v_, scale, bias, mask);
  } else {
    Tensor no_probs;
    attention_forward(o_, no_probs, *qa, *ka, v_, scale, bias, mask);
  }
  ensure_shape(merged_, {B, N, dim_});
  merge_heads_forward(merged_, o_);
  proj_.forward(y, merged_, training, Act::none, residual, out_scale);
}

void AttentionLayer::backward(Tensor& dx, const Tensor& dy, bool overwrite_dx) {
  const int64_t hd = dim_ / heads_;
  const bool cosine = logit_scale_.value.defined();
  const float scale = cosine ? 1.0f : 1.0f / std::sqrt(static_cast<float>(hd));
  ensure_shape(d_merged_, merged_.shape());
  proj_.backward(d_merged_, dy, /*overwrite_dx=*/true);
  const bool biased = encoding_ && encoding_->has_bias();
  Tensor dbias;
  if (biased) {
    ensure_shape(dbias_, bias_.shape());
    dbias_.zero();
    dbias = dbias_;
  }
  if (tokens_layout_) {
    ensure_shape(d_qkv_, qkv_out_.shape());
    // The qkv projection's bias gradient is summed by the attention backward, pair by pair.
    Param& qkv_bias = qkv_.bias();
    attention_backward_tokens(d_qkv_, dbias, d_merged_, qkv_out_, probs_, heads_, scale,
                              qkv_bias.grad);
    if (biased) encoding_->bias_backward(dbias_, geom_);
    qkv_.backward(dx, d_qkv_, overwrite_dx, /*bias_grad_added=*/qkv_bias.grad.defined());
    return;
  }
  ensure_shape(d_o_, o_.shape());
  d_o_.zero();
  merge_heads_backward(d_o_, d_merged_);

  const bool rotated = encoding_ && encoding_->has_rotation();
  ensure_shape(dq_, q_.shape());
  ensure_shape(dk_, k_.shape());
  ensure_shape(dv_, v_.shape());
  dq_.zero();
  dk_.zero();
  dv_.zero();
  // The attention's own inputs: (q, k), rotated, then normalised (cosine); gradients flow back
  // through the same steps.
  Tensor& q_in = rotated ? q_rot_ : q_;
  Tensor& k_in = rotated ? k_rot_ : k_;
  if (rotated) {
    ensure_shape(dq_rot_, q_.shape());
    ensure_shape(dk_rot_, k_.shape());
    dq_rot_.zero();
    dk_rot_.zero();
  }
  Tensor& dq_in = rotated ? dq_rot_ : dq_;
  Tensor& dk_in = rotated ? dk_rot_ : dk_;
  if (cosine) {
    ensure_shape(dqn_, q_.shape());
    ensure_shape(dkn_, k_.shape());
    dqn_.zero();
    dkn_.zero();
    attention_backward(dqn_, dkn_, dv_, dbias, d_o_, qn_, kn_, v_, probs_, scale);
    // dq_in / dk_in are zero here, so overwriting them is accumulating.
    cosine_qk_backward(dq_in, dk_in, logit_scale_.grad, dqn_, dkn_, q_in, k_in, logit_scale_.value,
                       kMaxLogitScale);
  } else {
    attention_backward(dq_in, dk_in, dv_, dbias, d_o_, q_in, k_in, v_, probs_, scale);
  }
  if (rotated) encoding_->rotate_backward(dq_, dk_, dq_rot_, dk_rot_, q_, k_, geom_);
  if (biased) encoding_->bias_backward(dbias_, geom_);
  ensure_shape(d_qkv_, qkv_out_.shape());
  d_qkv_.zero();
  split_heads_backward(d_qkv_, dq_, dk_, dv_);
  qkv_.backward(dx, d_qkv_, overwrite_dx);
}

// ---- MLP ----------------------------------------------------------------------------------------

MlpLayer::MlpLayer(const std::string& name, int64_t dim, int64_t hidden, Rng& rng, MlpStyle style)
    : fc1_(name + ".fc1", dim, style.kind == Mlp::swiglu ? 2 * hidden : hidden, true, rng),
      fc2_(name + ".fc2", hidden, dim, true, rng),
      style_(style) {
  if (style.norm && style.kind != Mlp::swiglu) {
    throw std::logic_error("MlpLayer: norm without SwiGLU");
  }
  if (style.norm) norm_ = LayerNormLayer(name + ".norm", hidden, style.eps);
}

void MlpLayer::forward(Tensor& y, const Tensor& x, bool training, const Tensor& residual,
                       const Tensor& scale) {
  if (style_.kind == Mlp::quick_gelu) {
    if (training) {
      fc1_.forward(pre_, x, true);  // the pre-activation, which quick_gelu's backward reads
      ensure_shape(h_, pre_.shape());
      quick_gelu_forward(h_, pre_);
    } else {
      fc1_.forward(h_, x, false, Act::quick_gelu);
    }
    fc2_.forward(y, h_, training, Act::none, residual, scale);
    return;
  }
  if (style_.kind == Mlp::swiglu) {
    fc1_.forward(pre_, x, training);  // [..., 2 hidden]
    ensure_shape(h_, pre_.shape().with_last(pre_.size(-1) / 2));
    swiglu_forward(h_, pre_);
    if (style_.norm) norm_.forward(hn_, h_, training);
    fc2_.forward(y, style_.norm ? hn_ : h_, training, Act::none, residual, scale);
    return;
  }
  if (training) {
    // h = GELU(fc1(x)) and pre_ = GELU's derivative, which is all the backward needs of the
    // pre-activation, block by block while the products are in cache.
    fc1_.forward_gelu_with_derivative(h_, pre_, x);
  } else {
    fc1_.forward(h_, x, false, Act::gelu);
  }
  fc2_.forward(y, h_, training, Act::none, residual, scale);
}

void MlpLayer::backward(Tensor& dx, const Tensor& dy, bool overwrite_dx) {
  ensure_shape(dh_, h_.shape());
  if (style_.kind == Mlp::quick_gelu) {
    fc2_.backward(dh_, dy, /*overwrite_dx=*/true);
    quick_gelu_backward(dh_, dh_, pre_);
    fc1_.backward(dx, dh_, overwrite_dx);
    return;
  }
  if (style_.kind == Mlp::swiglu) {
    if (style_.norm) {
      ensure_shape(dhn_, h_.shape());
      fc2_.backward(dhn_, dy, /*overwrite_dx=*/true);
      dh_.zero();
      norm_.backward(dh_, dhn_);
    } else {
      fc2_.backward(dh_, dy, /*overwrite_dx=*/true);
    }
    ensure_shape(dpre_, pre_.shape());
    swiglu_backward(dpre_, dh_, pre_);
    fc1_.backward(dx, dpre_, overwrite_dx);
    return;
  }
  // pre_: GELU's derivative, from the forward.
  Param& b1 = fc1_.bias();
  if (b1.grad.defined()) {
    // dh = (dy w2) * GELU' and fc1's bias gradient, block by block while each block of the
    // product is in cache; then fc2's own gradients.
    linear_gelu_backward_data(dh_, dy, fc2_.weight().value, pre_, b1.grad);
    Tensor no_dx;
    fc2_.backward(no_dx, dy);
    fc1_.backward(dx, dh_, overwrite_dx, /*bias_grad_added=*/true);
  } else {
    fc2_.backward(dh_, dy, /*overwrite_dx=*/true);
    gelu_backward_with_derivative(dh_, dh_, pre_);
    fc1_.backward(dx, dh_, overwrite_dx);
  }
}

// ---- Transformer block --------------------------------------------------------------------------

TransformerBlock::TransformerBlock(const std::string& name, int64_t dim, int64_t heads,
                                   int64_t hidden, float eps,
                                   std::unique_ptr<AttentionEncoding> encoding, Rng& rng,
                                   double layer_scale, BlockStyle style, MlpStyle mlp,
                                   bool qkv_bias)
    : norm1_(name + ".norm1", dim, eps),
      norm2_(name + ".norm2", dim, eps),
      attn_(name + ".attn", dim, heads, std::move(encoding), rng, style == BlockStyle::swin_v2,
            qkv_bias),
      mlp_(name + ".mlp", dim, hidden, rng, mlp),
      style_(style) {
  if (layer_scale > 0 && style == BlockStyle::swin_v2) {
    throw std::logic_error("TransformerBlock: layer scale with Swin V2's post-norm");
  }
  if (layer_scale > 0) {
    const float g = static_cast<float>(layer_scale);
    // 1-D, so no weight decay (timm's param groups).
    ls1_ = make_param(name + ".ls1.gamma", Tensor::full({dim}, g), true);
    ls2_ = make_param(name + ".ls2.gamma", Tensor::full({dim}, g), true);
  }
}

void TransformerBlock::collect(std::vector<Param*>& out) {
  // timm's order: norm1, attn, ls1, norm2, mlp, ls2 (Swin V2: attn, norm1, mlp, norm2).
  if (style_ == BlockStyle::swin_v2) {
    attn_.collect(out);
    norm1_.collect(out);
    mlp_.collect(out);
    norm2_.collect(out);
    return;
  }
  norm1_.collect(out);
  attn_.collect(out);
  if (ls1_.value.defined()) out.push_back(&ls1_);
  norm2_.collect(out);
  mlp_.collect(out);
  if (ls2_.value.defined()) out.push_back(&ls2_);
}

void TransformerBlock::forward(Tensor& y, const Tensor& x, const AttnGeometry& geom,
                               const Tensor& mask, bool training, const WindowLayout* windows) {
  windows_ = windows;
  if (style_ == BlockStyle::swin_v2) {
    forward_post_norm(y, x, geom, mask, training);
    return;
  }
  norm1_.forward(n1_, x, training);
  ensure_shape(x1_, x.shape());
  ensure_shape(y, x.shape());
  if (ls1_.value.defined()) {
    if (windows) throw std::logic_error("TransformerBlock: layer scale with windows");
    if (!training) {
      // Each gamma in its projection's epilogue, the residual added there too: no branch
      // output written and read again by passes of their own.
      attn_.forward(x1_, n1_, geom, mask, false, x, ls1_.value);  // x + gamma1 * attn(norm1(x))
      norm2_.forward(n2_, x1_, false);
      mlp_.forward(y, n2_, false, x1_, ls2_.value);  // x1 + gamma2 * mlp(norm2(x1))
      return;
    }
    ensure_shape(a_, x.shape());
    attn_.forward(a_, n1_, geom, mask, training);
    layer_scale_add_forward(x1_, x, ls1_.value, a_);  // x1 = x + gamma1 * attn(norm1(x))
    norm2_.forward(n2_, x1_, training);
    ensure_shape(m_, x.shape());
    mlp_.forward(m_, n2_, training);
    layer_scale_add_forward(y, x1_, ls2_.value, m_);  // y = x1 + gamma2 * mlp(norm2(x1))
    return;
  }
  if (!windows) {
    attn_.forward(x1_, n1_, geom, mask, training, x);  // x1 = x + attn(norm1(x))
  } else {
    const int64_t B = x.size(0), C = x.size(2);
    ensure_shape(xw_, {B * windows->windows, windows->window.count(), C});
    window_gather(xw_, n1_, *windows);
    ensure_shape(aw_, xw_.shape());
    attn_.forward(aw_, xw_, geom, windows->mask, training);
    window_scatter_add(x1_, x, aw_, *windows);  // x1 = x + attn(windows(norm1(x)))
  }
  norm2_.forward(n2_, x1_, training);
  mlp_.forward(y, n2_, training, x1_);  // y = x1 + mlp(norm2(x1))
}

void TransformerBlock::backward(Tensor& dx, const Tensor& dy) {
  if (style_ == BlockStyle::swin_v2) {
    dx.zero();  // backward_post_norm adds its paths into dx
    backward_post_norm(dx, dy);
    return;
  }
  const bool ls = ls1_.value.defined();
  ensure_shape(dx1_, dy.shape());
  ensure_shape(dn_, dy.shape());
  if (ls) {
    ensure_shape(dbranch_, dy.shape());
    layer_scale_add_backward(dbranch_, ls2_.grad, dy, ls2_.value, m_);
    mlp_.backward(dn_, dbranch_, /*overwrite_dx=*/true);
  } else {
    mlp_.backward(dn_, dy, /*overwrite_dx=*/true);
  }
  norm2_.backward(dx1_, dn_, /*residual: the MLP's*/ dy);  // dx1 = dy + d norm2
  if (ls) {
    layer_scale_add_backward(dbranch_, ls1_.grad, dx1_, ls1_.value, a_);
    attn_.backward(dn_, dbranch_, /*overwrite_dx=*/true);
  } else if (!windows_) {
    attn_.backward(dn_, dx1_, /*overwrite_dx=*/true);
  } else {
    ensure_shape(daw_, aw_.shape());
    window_gather(daw_, dx1_, *windows_);
    ensure_shape(dxw_, xw_.shape());
    attn_.backward(dxw_, daw_, /*overwrite_dx=*/true);
    dn_.zero();
    window_scatter_add(dn_, dxw_, *windows_);
  }
  norm1_.backward(dx, dn_, /*residual: the attention's*/ dx1_);  // dx = dx1 + d norm1
}

// Swin V2: x1 = x + norm1(attn(x)), y = x1 + norm2(mlp(x1)). a_ and m_ keep the branch outputs
// before their norms (the norms keep their own inputs for backward).
void TransformerBlock::forward_post_norm(Tensor& y, const Tensor& x, const AttnGeometry& geom,
                                         const Tensor& mask, bool training) {
  ensure_shape(a_, x.shape());
  if (!windows_) {
    attn_.forward(a_, x, geom, mask, training);
  } else {
    const int64_t B = x.size(0), C = x.size(2);
    ensure_shape(xw_, {B * windows_->windows, windows_->window.count(), C});
    window_gather(xw_, x, *windows_);
    ensure_shape(aw_, xw_.shape());
    attn_.forward(aw_, xw_, geom, windows_->mask, training);
    a_.zero();
    window_scatter_add(a_, aw_, *windows_);
  }
  norm1_.forward(n1_, a_, training);
  ensure_shape(x1_, x.shape());
  add_forward(x1_, x, n1_);
  ensure_shape(m_, x.shape());
  mlp_.forward(m_, x1_, training);
  norm2_.forward(n2_, m_, training);
  ensure_shape(y, x.shape());
  add_forward(y, x1_, n2_);
}

void TransformerBlock::backward_post_norm(Tensor& dx, const Tensor& dy) {
  ensure_shape(dbranch_, dy.shape());
  dbranch_.zero();
  norm2_.backward(dbranch_, dy);  // d m
  ensure_shape(dx1_, dy.shape());
  dx1_.copy_from(dy);             // residual path of the MLP
  mlp_.backward(dx1_, dbranch_);  // dx1 += d mlp
  add_forward(dx, dx, dx1_);      // residual path of the attention
  dbranch_.zero();
  norm1_.backward(dbranch_, dx1_);  // d a
  if (!windows_) {
    attn_.backward(dx, dbranch_);  // dx += d attn
    return;
  }
  ensure_shape(daw_, aw_.shape());
  window_gather(daw_, dbranch_, *windows_);
  ensure_shape(dxw_, xw_.shape());
  attn_.backward(dxw_, daw_, /*overwrite_dx=*/true);
  window_scatter_add(dx, dxw_, *windows_);
}

// ---- attention pooling (SigLIP) --------------------------------------------------------------

AttentionPoolLayer::AttentionPoolLayer(const std::string& name, int64_t dim, int64_t heads,
                                       int64_t hidden, float eps, Rng& rng)
    : dim_(dim),
      heads_(heads),
      q_(name + ".q", dim, dim, true, rng),
      kv_(name + ".kv", dim, 2 * dim, true, rng),
      proj_(name + ".proj", dim, dim, true, rng),
      norm_(name + ".norm", dim, eps),
      mlp_(name + ".mlp", dim, hidden, rng) {
  Tensor latent = Tensor::empty({1, 1, dim});
  rng.fill_trunc_normal(latent, 1.0 / std::sqrt(static_cast<double>(dim)));  // timm's std
  latent_ = make_param(name + ".latent", latent, true);
}

void AttentionPoolLayer::collect(std::vector<Param*>& out) {
  out.push_back(&latent_);
  q_.collect(out);
  kv_.collect(out);
  proj_.collect(out);
  norm_.collect(out);
  mlp_.collect(out);
}

void AttentionPoolLayer::collect_linears(std::vector<LinearLayer*>& out) {
  for (LinearLayer* l : {&q_, &kv_, &proj_}) out.push_back(l);
  mlp_.collect_linears(out);
}

void AttentionPoolLayer::forward(Tensor& y, const Tensor& x, bool training) {
  if (x.ndim() != 3 || x.size(2) != dim_) {
    throw ShapeError("attention pool: expected tokens [B, N, " + std::to_string(dim_) +
                     "], found " + x.shape().str());
  }
  const int64_t B = x.size(0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim_ / heads_));
  q_.forward(query_, latent_.value.reshape({1, dim_}), training);  // [1, D]
  kv_.forward(kv_out_, x, training);                               // [B, N, 2D]
  ensure_shape(attended_, {B, dim_});
  ensure_shape(probs_, {B, heads_, x.size(1)});
  latent_attention_forward(attended_, probs_, query_.reshape({dim_}), kv_out_, heads_, scale);
  proj_.forward(pooled_, attended_, training);  // [B, D]
  norm_.forward(normed_, pooled_, training);
  mlp_.forward(y, normed_, training, pooled_);  // y = p + mlp(norm(p))
}

void AttentionPoolLayer::backward(Tensor& dx, const Tensor& dy) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim_ / heads_));
  ensure_shape(d_normed_, normed_.shape());
  mlp_.backward(d_normed_, dy, /*overwrite_dx=*/true);
  ensure_shape(d_pooled_, pooled_.shape());
  norm_.backward(d_pooled_, d_normed_, /*residual: the MLP's*/ dy);
  ensure_shape(d_attended_, attended_.shape());
  proj_.backward(d_attended_, d_pooled_, /*overwrite_dx=*/true);
  ensure_shape(d_query_, {dim_});
  d_query_.zero();
  ensure_shape(d_kv_, kv_out_.shape());
  latent_attention_backward(d_query_, d_kv_, d_attended_, query_.reshape({dim_}), kv_out_, probs_,
                            heads_, scale);
  kv_.backward(dx, d_kv_, /*overwrite_dx=*/true);
  Tensor d_latent = latent_.grad.reshape({1, dim_});
  q_.backward(d_latent, d_query_.reshape({1, dim_}));  // accumulates into the latent's gradient
}

}  // namespace vitpe
