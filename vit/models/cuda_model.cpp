// CudaModel (vit/models/cuda_model.h): ViT and Swin V1 inference as one flat list of CUDA op
// calls per block, mirroring VisionTransformer::forward and SwinTransformer::forward.
//
// Reading order: the refusal of unsupported features (host only), the weights, the plan of one
// input grid (encoding terms, position table, Swin windows), the arena of one (batch, size),
// then the forward passes.
#include "vit/models/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/cuda_ops.h"
#include "ops/device_memory.h"
#include "vit/models/family.h"

namespace vitpe {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The first feature of `model` this path does not compute, or "" (host only: no device call).
std::string unsupported_feature(Model& model) {
  const ModelConfig& c = model.config();
  const FamilyDef& family = family_of(c);
  if (std::string f = family.gpu_unsupported(c); !f.empty()) return f;
  Model::EncodingParts parts = model.encoding_parts();
  if (parts.conditional) {
    return "the conditional encoding '" + parts.conditional->kind() +
           "' (it changes the tokens between blocks)";
  }
  // Head dims, and the attention encodings' terms, which the kernel must read in place; checked
  // at the configured geometry (terms() is host work).
  const std::vector<AttentionSite> sites = family.attention_sites(c);
  for (const AttentionSite& s : sites) {
    if (s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) {
      return "head dim " + std::to_string(s.head_dim) + " (" +
             std::to_string(s.head_dim * s.heads) + " channels / " + std::to_string(s.heads) +
             " heads; the fused attention kernel takes 32, 64 or 128)";
    }
  }
  for (size_t i = 0; i < parts.attention.size() && i < sites.size(); ++i) {
    AttentionEncoding* e = parts.attention[i];
    if (!e) continue;
    const AttentionTerms t = e->terms(sites[i].geom);
    if (e->has_bias() && !t.relative_table.defined() && !t.distance_slopes.defined())
      return "the attention encoding '" + e->kind() + "' (its bias has no in-kernel terms)";
    if (e->has_rotation() && (!t.rotation_freqs.defined() || t.rotation_approximate))
      return "the attention encoding '" + e->kind() + "' (its rotation has no in-kernel terms)";
  }
  return "";
}

// ---- weights ------------------------------------------------------------------------------------

struct DeviceLinear {
  Tensor w, b;  // [out, in], [out] or undefined; the activations' dtype
};
struct DeviceNorm {
  Tensor w, b;  // [D] f32
};
struct DeviceBlock {
  DeviceNorm norm1, norm2;
  DeviceLinear qkv, proj, fc1, fc2;
  int64_t heads = 0;
  AttentionEncoding* encoding = nullptr;  // the CPU model's (terms per grid)
  // Swin: the window as built (clamped to the configured stage grid) and whether it shifts.
  Grid window;
  bool shifted = false;
};
struct DeviceMerge {
  DeviceNorm norm;
  DeviceLinear reduction;
};

// The CPU model's parameters by name, uploaded.
class Uploader {
 public:
  Uploader(Model& model, DType dtype) : dtype_(dtype), name_(model.config().name) {
    for (Param* p : model.params()) params_[p->name] = p;
  }
  const Tensor& host(const std::string& name) const {
    auto it = params_.find(name);
    if (it == params_.end()) {
      throw std::logic_error("CudaModel: model " + name_ + " has no parameter '" + name + "'");
    }
    return it->second->value;
  }
  bool has(const std::string& name) const { return params_.count(name) > 0; }
  Tensor f32(const std::string& name) const { return host(name).to(Device::cuda); }
  Tensor act(const Tensor& h) const {
    return dtype_ == DType::f32 ? h.to(Device::cuda) : h.to(DType::bf16).to(Device::cuda);
  }
  DeviceNorm norm(const std::string& name) const {
    return {f32(name + ".weight"), f32(name + ".bias")};
  }
  // `scale`: a per-output factor [out] folded into the weight rows and the bias (layer scale's
  // gamma; gamma * (W x + b) = (gamma W) x + gamma b), or undefined.
  DeviceLinear linear(const std::string& name, const Tensor& scale = {}, float factor = 1.f) const {
    Tensor w = host(name + ".weight").clone();
    Tensor b = has(name + ".bias") ? host(name + ".bias").clone() : Tensor();
    const int64_t out = w.size(0), in = w.size(1);
    for (int64_t o = 0; o < out; ++o) {
      const float g = factor * (scale.defined() ? scale.f32()[o] : 1.f);
      if (g == 1.f) continue;
      for (int64_t i = 0; i < in; ++i) w.f32()[o * in + i] *= g;
      if (b.defined()) b.f32()[o] *= g;
    }
    return {act(w), b.defined() ? act(b) : Tensor()};
  }

 private:
  DType dtype_;
  std::string name_;
  std::map<std::string, Param*> params_;
};

// ---- the plan of one input grid -----------------------------------------------------------------

struct StagePlan {
  Grid res;  // token grid of the stage
  int64_t dim = 0;
  std::vector<cuda::AttentionParams> attn;  // per block: scale, device terms, shift
  std::vector<Grid> window;                 // per block (Swin)
  std::vector<int64_t> shift_r, shift_c;    // per block (Swin)
};

struct GridPlan {
  Grid grid;
  Tensor table;  // ViT/Swin absolute encoding on the device, f32, or undefined
  std::vector<StagePlan> stages;
};

// ---- the arena ----------------------------------------------------------------------------------

// One device allocation per dtype, carved into 256-byte aligned 1-D views; a view is shaped at
// each use (no allocation).
class Arena {
 public:
  explicit Arena(DType dtype) : dtype_(dtype) {}
  // Reserves n elements for `slot`; allocate() makes the views.
  void reserve(Tensor* slot, int64_t n) { wanted_.push_back({slot, n}); }
  void allocate() {
    const int64_t align = 256 / static_cast<int64_t>(dtype_size(dtype_));
    int64_t total = 0;
    for (auto& [slot, n] : wanted_) total += ceil_div(std::max<int64_t>(n, 1), align) * align;
    mem_ = Tensor();  // free the previous size's arena first
    mem_ = Tensor::empty(Shape{std::max<int64_t>(total, 1)}, dtype_, Device::cuda);
    int64_t off = 0;
    for (auto& [slot, n] : wanted_) {
      *slot = mem_.slice(off, off + n);
      off += ceil_div(std::max<int64_t>(n, 1), align) * align;
    }
    wanted_.clear();
  }

 private:
  DType dtype_;
  Tensor mem_;
  std::vector<std::pair<Tensor*, int64_t>> wanted_;
};

// A 1-D arena view as `shape` (its first shape.numel() elements).
Tensor shaped(const Tensor& buf, const Shape& shape) {
  if (shape.numel() > buf.numel()) {
    throw std::logic_error("CudaModel: buffer of " + std::to_string(buf.numel()) +
                           " elements is too small for " + shape.str());
  }
  return buf.slice(0, shape.numel()).reshape(shape);
}

// The activations of one (batch, image size), as 1-D views sized for the largest stage.
struct Buffers {
  int64_t B = 0, H = 0, W = 0;
  Tensor images32, logits32;        // f32: device input staging, logits before the copy back
  Tensor images, patches, x, n;     // activations' dtype
  Tensor wide, q, k, v, o;          // qkv and MLP hidden share `wide`
  Tensor cat, tok0, tok1, normed0;  // patch merging's gather; pooled tokens
  Tensor pooled, normed, logits;
  Tensor host_logits;  // CPU f32 [B, classes]
};

}  // namespace

// ---- the model ----------------------------------------------------------------------------------

struct CudaModel::Impl {
  Model& host;
  ModelConfig cfg;
  DType dtype;
  Model::EncodingParts parts;

  DeviceLinear patch;
  DeviceNorm patch_norm;  // Swin
  Tensor prefix;          // ViT: [P, D] f32 (class, distillation, registers), or undefined
  std::vector<std::vector<DeviceBlock>> stages;
  std::vector<DeviceMerge> merges;  // merges[i] starts stage i + 1
  DeviceNorm norm;
  DeviceLinear head, head_dist;

  std::map<std::pair<int64_t, int64_t>, GridPlan> plans;
  Arena arena, arena32;
  Buffers buf;

  float eps;  // every LayerNorm's (the family's architecture)

  Impl(Model& m, DType t)
      : host(m),
        cfg(m.config()),
        dtype(t),
        arena(t),
        arena32(DType::f32),
        eps(std::visit([](const auto& a) { return a.eps; }, cfg.arch)) {}

  void upload();
  const GridPlan& plan(Grid grid);
  void size_buffers(int64_t B, int64_t H, int64_t W, const GridPlan& p);
  const Tensor& forward(const Tensor& images);
  void forward_vit(const GridPlan& p);
  void forward_swin(const GridPlan& p);
  void vit_block(const DeviceBlock& w, const cuda::AttentionParams& attn, int64_t N);
  void swin_block(const DeviceBlock& w, const StagePlan& s, size_t j);
  // n: [Bw, N, C] normalised tokens -> y: [Bw, N, C] += proj(attention(qkv(n))); n is clobbered.
  void attention(Tensor& y, Tensor& n, const DeviceBlock& w, const cuda::AttentionParams& attn);
};

void CudaModel::Impl::upload() {
  const Uploader up(host, dtype);
  const bool vit = cfg.is_vit();
  patch = {up.act(up.host("patch_embed.proj.weight")), up.act(up.host("patch_embed.proj.bias"))};
  if (!vit) patch_norm = up.norm("patch_embed.norm");

  auto block = [&](const std::string& name, int64_t heads, AttentionEncoding* enc) {
    DeviceBlock b;
    b.norm1 = up.norm(name + ".norm1");
    b.norm2 = up.norm(name + ".norm2");
    const bool ls = vit && cfg.vit().layer_scale > 0;
    b.qkv = up.linear(name + ".attn.qkv");
    b.proj = up.linear(name + ".attn.proj", ls ? up.host(name + ".ls1.gamma") : Tensor());
    b.fc1 = up.linear(name + ".mlp.fc1");
    b.fc2 = up.linear(name + ".mlp.fc2", ls ? up.host(name + ".ls2.gamma") : Tensor());
    b.heads = heads;
    b.encoding = enc;
    return b;
  };
  size_t enc_index = 0;
  auto next_encoding = [&]() -> AttentionEncoding* {
    return enc_index < parts.attention.size() ? parts.attention[enc_index++] : nullptr;
  };
  if (vit) {
    std::vector<Tensor> rows;
    for (const char* name : {"cls_token", "dist_token", "reg_token"}) {
      if (up.has(name)) rows.push_back(up.host(name));
    }
    if (!rows.empty()) {
      Tensor pre = Tensor::empty({cfg.prefix_tokens(), cfg.vit().dim});
      int64_t off = 0;
      for (const Tensor& r : rows) {  // class, distillation, registers: VisionTransformer's order
        std::copy(r.f32(), r.f32() + r.numel(), pre.f32() + off);
        off += r.numel();
      }
      prefix = pre.to(Device::cuda);
    }
    stages.resize(1);
    const VitArch& a = cfg.vit();
    for (int64_t i = 0; i < a.depth; ++i)
      stages[0].push_back(block("blocks." + std::to_string(i), a.heads, next_encoding()));
    norm = up.norm(a.pool == Pool::cls ? "norm" : "fc_norm");  // VisionTransformer's choice
    // DeiT distilled: logits = (head(x0) + head_dist(x1)) / 2, the halves folded into the weights
    // (exact: a power of two).
    const float half = a.dist_token ? 0.5f : 1.f;
    head = up.linear("head", {}, half);
    if (a.dist_token) head_dist = up.linear("head_dist", {}, half);
    return;
  }
  const SwinArch& a = cfg.swin();
  const std::vector<AttentionSite> sites = family_of(cfg).attention_sites(cfg);
  size_t block_index = 0;
  stages.resize(a.depths.size());
  for (size_t s = 0; s < a.depths.size(); ++s) {
    const std::string name = "layers." + std::to_string(s);
    if (s > 0) {
      merges.push_back(
          {up.norm(name + ".downsample.norm"), up.linear(name + ".downsample.reduction")});
    }
    for (int64_t j = 0; j < a.depths[s]; ++j) {
      DeviceBlock b =
          block(name + ".blocks." + std::to_string(j), a.stage_heads[s], next_encoding());
      b.window = sites.at(block_index++).geom.window;
      b.shifted = j % 2 == 1;
      stages[s].push_back(std::move(b));
    }
  }
  norm = up.norm("norm");
  head = up.linear("head.fc");
}

// Encoding terms, position table and (Swin) windows of one input grid; made once per grid.
const GridPlan& CudaModel::Impl::plan(Grid grid) {
  auto key = std::make_pair(grid.rows, grid.cols);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  GridPlan p;
  p.grid = grid;
  const std::string where = "CudaModel (" + cfg.name + ", input " +
                            std::to_string(grid.rows * cfg.patch) + "x" +
                            std::to_string(grid.cols * cfg.patch) + ")";
  if (parts.token) p.table = parts.token->table(grid).to(Device::cuda);
  auto attn_params = [&](const DeviceBlock& b, int64_t dim, const AttnGeometry& geom) {
    cuda::AttentionParams a;
    a.scale = 1.0f / std::sqrt(static_cast<float>(dim / b.heads));
    if (b.encoding) {
      a.terms = b.encoding->terms(geom).to(Device::cuda);
    } else {
      a.terms.prefix = geom.prefix;
      a.terms.window_rows = geom.window.rows;
      a.terms.window_cols = geom.window.cols;
    }
    return a;
  };
  if (cfg.is_vit()) {
    StagePlan s;
    s.res = grid;
    s.dim = cfg.vit().dim;
    for (const DeviceBlock& b : stages[0])
      s.attn.push_back(attn_params(b, s.dim, AttnGeometry{grid, cfg.prefix_tokens()}));
    p.stages.push_back(std::move(s));
    return plans.emplace(key, std::move(p)).first->second;
  }
  Grid res = grid;
  for (size_t si = 0; si < stages.size(); ++si) {
    if (si > 0) {
      if (res.rows % 2 || res.cols % 2) {
        throw std::invalid_argument(where + ": stage " + std::to_string(si - 1) + "'s " +
                                    res.str() +
                                    " token grid is odd, and the GPU path does not pad before a "
                                    "patch merging as the CPU model does; use an input size "
                                    "whose stage grids are even, or the CPU");
      }
      res = {res.rows / 2, res.cols / 2};
    }
    StagePlan s;
    s.res = res;
    s.dim = cfg.swin().dim << si;
    for (const DeviceBlock& b : stages[si]) {
      // SwinBlock::layout: the built window clamped to this grid; a shift only along an axis
      // longer than the built window.
      const Grid w{std::min(b.window.rows, res.rows), std::min(b.window.cols, res.cols)};
      if (res.rows % w.rows || res.cols % w.cols) {
        throw std::invalid_argument(where + ": stage " + std::to_string(si) + "'s " + res.str() +
                                    " token grid is not a multiple of the " + w.str() +
                                    " window, and the GPU path does not pad as the CPU model "
                                    "does; use an input size whose stage grids are multiples of "
                                    "the window, or the CPU");
      }
      const int64_t sr = b.shifted && res.rows > b.window.rows ? b.window.rows / 2 : 0;
      const int64_t sc = b.shifted && res.cols > b.window.cols ? b.window.cols / 2 : 0;
      cuda::AttentionParams a = attn_params(b, s.dim, AttnGeometry{w, 0});
      a.shift_r = sr;
      a.shift_c = sc;
      a.image_rows = res.rows;
      a.image_cols = res.cols;
      s.attn.push_back(std::move(a));
      s.window.push_back(w);
      s.shift_r.push_back(sr);
      s.shift_c.push_back(sc);
    }
    p.stages.push_back(std::move(s));
  }
  return plans.emplace(key, std::move(p)).first->second;
}

// Buffers for batch B of H x W images: each sized for the largest stage that uses it.
void CudaModel::Impl::size_buffers(int64_t B, int64_t H, int64_t W, const GridPlan& p) {
  if (buf.B == B && buf.H == H && buf.W == W) return;
  buf = Buffers();
  const int64_t C = cfg.channels, P = cfg.prefix_tokens();
  const int64_t Np = p.grid.count();
  // Swin's `cat` holds a stage's windows [B nW, N, C] and the patch merging's gather
  // [B, L, 4 (C/2)]; ViT does not use it.
  int64_t tokens = 0, wide = 0, cat = 0, last_dim = 0;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const int64_t L = (s == 0 ? P : 0) + p.stages[s].res.count(), D = p.stages[s].dim;
    int64_t hidden = 0;
    for (const DeviceBlock& b : stages[s]) hidden = std::max(hidden, b.fc1.w.size(0));
    tokens = std::max(tokens, B * L * D);
    wide = std::max(wide, B * L * std::max(3 * D, hidden));
    if (cfg.is_swin()) cat = std::max(cat, B * L * (s > 0 ? 2 * D : D));
    last_dim = D;
  }
  arena32.reserve(&buf.images32, B * C * H * W);
  arena32.reserve(&buf.logits32, B * cfg.classes);
  if (dtype != DType::f32) arena.reserve(&buf.images, B * C * H * W);
  arena.reserve(&buf.patches, B * Np * cfg.embed_dim());
  for (Tensor* t : {&buf.x, &buf.n, &buf.q, &buf.k, &buf.v, &buf.o}) arena.reserve(t, tokens);
  arena.reserve(&buf.wide, wide);
  arena.reserve(&buf.cat, cat);
  for (Tensor* t : {&buf.tok0, &buf.tok1, &buf.normed0, &buf.pooled, &buf.normed})
    arena.reserve(t, B * last_dim);
  arena.reserve(&buf.logits, B * cfg.classes);
  arena.allocate();
  arena32.allocate();
  if (dtype == DType::f32) buf.images = buf.images32;
  buf.host_logits = Tensor::empty({B, cfg.classes});
  buf.B = B;
  buf.H = H;
  buf.W = W;
}

const Tensor& CudaModel::Impl::forward(const Tensor& images) {
  const char* op = "CudaModel::forward";
  if (!images.defined() || images.dtype() != DType::f32 || images.ndim() != 4 ||
      images.size(1) != cfg.channels) {
    throw ShapeError(std::string(op) + ": expected images [B, " + std::to_string(cfg.channels) +
                     ", H, W] f32, found " +
                     (images.defined() ? images.shape().str() + " " + dtype_name(images.dtype())
                                       : std::string("an undefined tensor")));
  }
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3), pt = cfg.patch;
  if (B == 0) throw ShapeError(std::string(op) + ": expected at least one image, found B = 0");
  if (H % pt || W % pt || H == 0 || W == 0) {
    throw ShapeError(std::string(op) + ": image size " + std::to_string(H) + "x" +
                     std::to_string(W) + " is not a multiple of the patch size " +
                     std::to_string(pt) + " (configured size " + std::to_string(cfg.img_rows) +
                     "x" + std::to_string(cfg.img_cols) + ")");
  }
  const GridPlan& p = plan({H / pt, W / pt});
  size_buffers(B, H, W, p);
  const Shape ishape = images.shape();
  Tensor x32 = images;  // device f32 input read in place
  if (images.device() == Device::cpu) {
    x32 = shaped(buf.images32, ishape);
    x32.copy_from(images);
  }
  Tensor x = x32;
  if (dtype != DType::f32) {
    x = shaped(buf.images, ishape);
    cuda::convert(x, x32);
  }
  Tensor patches = shaped(buf.patches, {B, p.grid.count(), cfg.embed_dim()});
  cuda::patch_embed_forward(patches, x, patch.w, patch.b);  // [B, Np, D]
  if (cfg.is_vit())
    forward_vit(p);
  else
    forward_swin(p);
  Tensor logits = shaped(buf.logits, {B, cfg.classes});
  Tensor logits32 = logits;
  if (dtype != DType::f32) {
    logits32 = shaped(buf.logits32, {B, cfg.classes});
    cuda::convert(logits32, logits);
  }
  buf.host_logits.copy_from(logits32);  // waits for the queued work
  return buf.host_logits;
}

// VisionTransformer::forward: prefix tokens + patches + table, pre-norm blocks, pool, norm, head.
void CudaModel::Impl::forward_vit(const GridPlan& p) {
  const int64_t B = buf.B, D = cfg.vit().dim, P = cfg.prefix_tokens(), Np = p.grid.count(),
                N = P + Np;
  const Tensor patches = shaped(buf.patches, {B, Np, D});
  Tensor x = shaped(buf.x, {B, N, D});
  cuda::assemble_tokens_forward(x, prefix, patches, p.table);  // [B, N, D]
  for (size_t i = 0; i < stages[0].size(); ++i) vit_block(stages[0][i], p.stages[0].attn[i], N);

  Tensor logits = shaped(buf.logits, {B, cfg.classes});
  Tensor normed = shaped(buf.normed, {B, D});
  if (cfg.vit().dist_token) {
    // The class and distillation tokens, each normalised and through its head; the halves are
    // in the weights, so the second head adds onto the first.
    Tensor t0 = shaped(buf.tok0, {B, 1, D}), t1 = shaped(buf.tok1, {B, 1, D});
    cuda::select_tokens_forward(t0, x, 0);
    cuda::select_tokens_forward(t1, x, 1);
    Tensor n0 = shaped(buf.normed0, {B, D});
    cuda::layernorm_forward(n0, t0.reshape({B, D}), norm.w, norm.b, eps);
    cuda::layernorm_forward(normed, t1.reshape({B, D}), norm.w, norm.b, eps);
    cuda::linear_forward(logits, n0, head.w, head.b);
    cuda::linear_forward(logits, normed, head_dist.w, head_dist.b, Act::none, logits);
    return;
  }
  Tensor pooled = shaped(buf.pooled, {B, D});
  if (cfg.vit().pool == Pool::cls) {
    Tensor t0 = pooled.reshape({B, 1, D});
    cuda::select_tokens_forward(t0, x, 0);  // LayerNorm is per token: norm-then-pool
  } else {
    cuda::mean_tokens_forward(pooled, x, P);
  }
  cuda::layernorm_forward(normed, pooled, norm.w, norm.b, eps);
  cuda::linear_forward(logits, normed, head.w, head.b);  // [B, classes]
}

// TransformerBlock::forward, pre-norm, attention over all N tokens; x is updated in place.
void CudaModel::Impl::vit_block(const DeviceBlock& w, const cuda::AttentionParams& attn,
                                int64_t N) {
  const int64_t B = buf.B, D = cfg.vit().dim;
  Tensor x = shaped(buf.x, {B, N, D});
  Tensor n = shaped(buf.n, {B, N, D});
  cuda::layernorm_forward(n, x, w.norm1.w, w.norm1.b, eps);
  attention(x, n, w, attn);  // x += attn(norm1(x))
  cuda::layernorm_forward(n, x, w.norm2.w, w.norm2.b, eps);
  Tensor h = shaped(buf.wide, {B, N, w.fc1.w.size(0)});
  cuda::linear_forward(h, n, w.fc1.w, w.fc1.b, Act::gelu);
  cuda::linear_forward(x, h, w.fc2.w, w.fc2.b, Act::none, x);  // x += mlp(norm2(x))
}

void CudaModel::Impl::attention(Tensor& y, Tensor& n, const DeviceBlock& w,
                                const cuda::AttentionParams& attn) {
  const int64_t Bw = n.size(0), N = n.size(1), C = n.size(2), H = w.heads, hd = C / H;
  Tensor qkv = shaped(buf.wide, {Bw, N, 3 * C});
  cuda::linear_forward(qkv, n, w.qkv.w, w.qkv.b);  // [Bw, N, 3C]
  Tensor q = shaped(buf.q, {Bw, H, N, hd}), k = shaped(buf.k, {Bw, H, N, hd});
  Tensor v = shaped(buf.v, {Bw, H, N, hd}), o = shaped(buf.o, {Bw, H, N, hd});
  cuda::split_heads_forward(q, k, v, qkv, H);
  cuda::attention_forward(o, q, k, v, attn);  // [Bw, H, N, hd]
  cuda::merge_heads_forward(n, o);            // [Bw, N, C]
  cuda::linear_forward(y, n, w.proj.w, w.proj.b, Act::none, y);
}

// SwinTransformer::forward: patch embed + LN (+ table), stages of windowed blocks with patch
// merging between them, LN, mean over tokens, head.
void CudaModel::Impl::forward_swin(const GridPlan& p) {
  const int64_t B = buf.B;
  const int64_t L0 = p.grid.count();
  const int64_t C0 = cfg.swin().dim;
  Tensor x = shaped(buf.x, {B, L0, C0});
  cuda::layernorm_forward(x, shaped(buf.patches, {B, L0, C0}), patch_norm.w, patch_norm.b, eps);
  if (p.table.defined()) cuda::assemble_tokens_forward(x, Tensor(), x, p.table);  // x += table
  for (size_t s = 0; s < stages.size(); ++s) {
    const StagePlan& sp = p.stages[s];
    const int64_t L = sp.res.count(), C = sp.dim;
    if (s > 0) {
      // PatchMerging: 2x2 gather [B, L, 4 C/2] -> LN -> reduction to C. The gather reads the
      // previous stage's x, which the reduction then overwrites.
      const StagePlan& prev = p.stages[s - 1];
      Tensor xin = shaped(buf.x, {B, prev.res.count(), prev.dim});
      Tensor cat = shaped(buf.cat, {B, L, 2 * C});
      cuda::patch_merge_forward(cat, xin, prev.res.rows, prev.res.cols);
      cuda::layernorm_forward(cat, cat, merges[s - 1].norm.w, merges[s - 1].norm.b, eps);
      Tensor xs = shaped(buf.x, {B, L, C});
      cuda::linear_forward(xs, cat, merges[s - 1].reduction.w, Tensor());
    }
    for (size_t j = 0; j < stages[s].size(); ++j) swin_block(stages[s][j], sp, j);
  }
  const StagePlan& last = p.stages.back();
  const int64_t L = last.res.count(), C = last.dim;
  Tensor xl = shaped(buf.x, {B, L, C});
  Tensor n = shaped(buf.n, {B, L, C});
  cuda::layernorm_forward(n, xl, norm.w, norm.b, eps);
  Tensor pooled = shaped(buf.pooled, {B, C});
  cuda::mean_tokens_forward(pooled, n, 0);
  Tensor logits = shaped(buf.logits, {B, cfg.classes});
  cuda::linear_forward(logits, pooled, head.w, head.b);
}

// TransformerBlock::forward with windows: x + merge(attn(windows(shift(norm1(x))))), then
// + mlp(norm2(.)). Windows and the shift permute tokens and LayerNorm is per token, so the block
// partitions x itself, normalises the windows, adds the attention onto them and merges back:
// merge(partition(x) + a) = x + merge(a) (no padding: plan() refuses grids that would need it).
void CudaModel::Impl::swin_block(const DeviceBlock& w, const StagePlan& s, size_t j) {
  const int64_t B = buf.B, R = s.res.rows, Cc = s.res.cols, L = s.res.count(), C = s.dim;
  const Grid win = s.window[j];
  const int64_t nW = (R / win.rows) * (Cc / win.cols), N = win.count();
  Tensor x = shaped(buf.x, {B, L, C});
  Tensor xw = shaped(buf.cat, {B * nW, N, C});  // free between patch mergings
  Tensor n = shaped(buf.n, {B * nW, N, C});
  cuda::window_partition_forward(xw, x, R, Cc, win.rows, win.cols, s.shift_r[j], s.shift_c[j]);
  cuda::layernorm_forward(n, xw, w.norm1.w, w.norm1.b, eps);
  attention(xw, n, w, s.attn[j]);  // xw += attn(norm1(xw)), shift mask in the kernel
  cuda::window_merge_forward(x, xw, R, Cc, win.rows, win.cols, s.shift_r[j], s.shift_c[j]);
  Tensor n2 = shaped(buf.n, {B, L, C});
  cuda::layernorm_forward(n2, x, w.norm2.w, w.norm2.b, eps);
  Tensor h = shaped(buf.wide, {B, L, w.fc1.w.size(0)});
  cuda::linear_forward(h, n2, w.fc1.w, w.fc1.b, Act::gelu);
  cuda::linear_forward(x, h, w.fc2.w, w.fc2.b, Act::none, x);  // x += mlp(norm2(x))
}

// ---- public -------------------------------------------------------------------------------------

CudaModel::CudaModel(Model& model, DType dtype) {
  const ModelConfig& c = model.config();
  const std::string what = "model " + c.name + " (" + c.family_label() + ")";
  const std::string feature = unsupported_feature(model);
  if (!feature.empty()) {
    throw std::invalid_argument("the CUDA path does not run " + feature + ", which " + what +
                                " uses: run it on the CPU (--device cpu)");
  }
  if (!cuda_available()) {
    throw std::runtime_error("cannot run " + what +
                             " on the cuda device: no CUDA device is available (no NVIDIA GPU, "
                             "or its driver is missing)");
  }
  impl_ = std::make_unique<Impl>(model, dtype);
  impl_->parts = model.encoding_parts();
  impl_->upload();
}

CudaModel::~CudaModel() = default;

const Tensor& CudaModel::forward(const Tensor& images) { return impl_->forward(images); }

const ModelConfig& CudaModel::config() const { return impl_->cfg; }

DType CudaModel::dtype() const { return impl_->dtype; }

}  // namespace vitpe
