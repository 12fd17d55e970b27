// The ViT family's foreign checkpoints: timm's VisionTransformer, Eva and Beit state dicts (our
// names are timm's) and torchvision's vit_*; their renaming, the tensors fused or split into ours
// (Eva's per-model RoPE frequencies, EVA-02's separate projections, BEiT's and Eva's q/v biases),
// the config read off the tensors and the preprocessing their weights were published with.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ops/util.h"
#include "vit/models/vit/vit_family.h"

namespace vitpe::vit_family {

namespace {

// ---- names
// ----------------------------------------------------------------------------------------

// BEiT (timm's Beit): layer scale as gamma_1 / gamma_2 of each block.
std::string timm_name(const std::string& name) {
  auto p = split(name, '.');
  if (p.size() == 3 && p[0] == "blocks" && is_digits(p[1]) &&
      (p[2] == "gamma_1" || p[2] == "gamma_2")) {
    return "blocks." + p[1] + (p[2] == "gamma_1" ? ".ls1.gamma" : ".ls2.gamma");
  }
  return name;
}

// torchvision block-internal names -> timm.
std::string tv_block_part(const std::string& rest) {
  static const std::vector<std::pair<std::string, std::string>> map = {
      {"ln_1.", "norm1."},
      {"ln_2.", "norm2."},
      {"self_attention.in_proj_weight", "attn.qkv.weight"},
      {"self_attention.in_proj_bias", "attn.qkv.bias"},
      {"self_attention.out_proj.", "attn.proj."},
      {"mlp.0.", "mlp.fc1."},
      {"mlp.3.", "mlp.fc2."},
      {"mlp.linear_1.", "mlp.fc1."},
      {"mlp.linear_2.", "mlp.fc2."},
  };
  for (const auto& [from, to] : map) {
    if (starts_with(rest, from)) return to + rest.substr(from.size());
  }
  return rest;
}

std::string torchvision_name(const std::string& name) {
  if (name == "class_token") return "cls_token";
  if (starts_with(name, "conv_proj.")) return "patch_embed.proj." + name.substr(10);
  if (name == "encoder.pos_embedding") return "pos_embed";
  if (starts_with(name, "encoder.ln.")) return "norm." + name.substr(11);
  if (starts_with(name, "heads.head.")) return "head." + name.substr(11);
  const std::string layer = "encoder.layers.encoder_layer_";
  if (starts_with(name, layer)) {
    std::string rest = name.substr(layer.size());
    size_t dot = rest.find('.');
    return "blocks." + rest.substr(0, dot) + "." + tv_block_part(rest.substr(dot + 1));
  }
  return name;
}

// ---- tensors fused or split into ours
// ------------------------------------------------------------

// timm's Eva keeps RoPE-Mixed's frequencies of all blocks in one tensor "rope.freqs" [2, depth,
// H, hd/2]; ours are per block, "blocks.N.attn.rope.freqs" [2, H, hd/2].
void split_eva_rope_freqs(TensorMap& tensors, const std::string& path) {
  auto it = tensors.find("rope.freqs");
  if (it == tensors.end()) return;
  const Tensor f = as_f32(it->second);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  const int64_t depth = count_blocks(names, "blocks.");
  if (f.ndim() != 4 || f.size(0) != 2 || f.size(1) != depth || f.size(2) < 1 || f.size(3) < 1) {
    throw std::runtime_error(path + ": rope.freqs: expected [2, depth " + std::to_string(depth) +
                             ", heads, head_dim/2] (timm's RoPE-Mixed), found " + f.shape().str());
  }
  const int64_t H = f.size(2), half = f.size(3), plane = depth * H * half;
  for (int64_t b = 0; b < depth; ++b) {
    Tensor block = Tensor::empty({2, H, half});
    for (int64_t axis = 0; axis < 2; ++axis) {
      std::memcpy(block.f32() + axis * H * half, f.f32() + axis * plane + b * H * half,
                  H * half * sizeof(float));
    }
    tensors.emplace("blocks." + std::to_string(b) + ".attn.rope.freqs", block);
  }
  tensors.erase(it);
}

// EVA-02 base and large keep separate projections: attn.q_proj / k_proj / v_proj (k without a
// bias) and the SwiGLU's mlp.fc1_g / fc1_x. They become our fused attn.qkv [3D, D] (bias
// [q, 0, v]) and mlp.fc1 [2 hidden, D] (gate rows first, as timm's GluMlp). A block with only
// some of the parts, or parts of different shapes, is an error naming them.
void fuse_split_projections(TensorMap& tensors, const std::string& path) {
  std::vector<std::string> attns, mlps;
  for (const auto& [name, t] : tensors) {
    if (ends_with(name, ".attn.q_proj.weight")) attns.push_back(name.substr(0, name.size() - 13));
    if (ends_with(name, ".mlp.fc1_g.weight")) mlps.push_back(name.substr(0, name.size() - 12));
  }
  auto take = [&](const std::string& name, const std::string& what) {
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw std::runtime_error(path + ": " + name + " missing beside " + what);
    Tensor t = it->second;
    tensors.erase(it);
    return t;
  };
  auto check_same_shape = [&](const std::vector<Tensor>& ts, const std::string& what) {
    for (const Tensor& t : ts) {
      if (t.shape() != ts[0].shape()) {
        throw std::runtime_error(path + ": " + what + ": the parts have different shapes (" +
                                 ts[0].shape().str() + " and " + t.shape().str() + ")");
      }
    }
  };
  for (const std::string& attn : attns) {  // "blocks.N.attn."
    const std::string what = attn + "q_proj.weight";
    std::vector<Tensor> w = {take(attn + "q_proj.weight", what), take(attn + "k_proj.weight", what),
                             take(attn + "v_proj.weight", what)};
    check_same_shape(w, attn + "{q,k,v}_proj.weight");
    tensors.emplace(attn + "qkv.weight", concat_rows(w));
    const bool qb = tensors.count(attn + "q_proj.bias"), vb = tensors.count(attn + "v_proj.bias");
    if (qb || vb || tensors.count(attn + "k_proj.bias")) {
      const int64_t D = w[0].size(0);
      std::vector<Tensor> b;
      for (const char* part : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
        auto it = tensors.find(attn + part);
        b.push_back(it == tensors.end() ? Tensor::zeros({D}) : take(attn + part, what));
      }
      check_same_shape(b, attn + "{q,k,v}_proj.bias");
      tensors.emplace(attn + "qkv.bias", concat_rows(b));
    }
  }
  for (const std::string& mlp : mlps) {  // "blocks.N.mlp."
    const std::string what = mlp + "fc1_g.weight";
    std::vector<Tensor> w = {take(mlp + "fc1_g.weight", what), take(mlp + "fc1_x.weight", what)};
    check_same_shape(w, mlp + "fc1_{g,x}.weight");
    tensors.emplace(mlp + "fc1.weight", concat_rows(w));
    if (tensors.count(mlp + "fc1_g.bias") || tensors.count(mlp + "fc1_x.bias")) {
      std::vector<Tensor> b = {take(mlp + "fc1_g.bias", what), take(mlp + "fc1_x.bias", what)};
      check_same_shape(b, mlp + "fc1_{g,x}.bias");
      tensors.emplace(mlp + "fc1.bias", concat_rows(b));
    }
  }
}

void prepare_timm(TensorMap& tensors, const std::string& path) {
  split_eva_rope_freqs(tensors, path);
  fuse_split_projections(tensors, path);
  merge_qv_bias(tensors, path);
}

// ---- the config read off the tensors
// -------------------------------------------------------------

int64_t square_side(int64_t n) {
  const int64_t side =
      n > 0 ? static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n)))) : 0;
  return side > 0 && side * side == n ? side : int64_t{0};
}

// Depth from the blocks, class token, pooling and encoding from the tensors present, the image
// size from pos_embed's rows (a square grid) unless given.
void infer_vit(InferredConfig& out, const TensorSet& ts, const InferHints& hints) {
  ModelConfig& c = out.config;
  std::vector<std::string>& notes = out.notes;
  VitArch& a = c.vit();
  a.eps = 1e-6f;
  a.depth = count_blocks(ts.names, "blocks.");
  a.mlp_dim = ts.need("blocks.0.mlp.fc1.weight").size(0);
  // EVA-02's SwiGLU: fc1 makes twice the width fc2 reads (gate and value halves).
  const int64_t fc2_in = ts.need("blocks.0.mlp.fc2.weight").size(1);
  if (fc2_in * 2 == a.mlp_dim) {
    a.mlp = Mlp::swiglu;
    a.mlp_dim = fc2_in;
    a.mlp_norm = ts.has("blocks.0.mlp.norm.weight");
    notes.push_back(std::string("SwiGLU MLP (EVA-02)") +
                    (a.mlp_norm ? " with a norm before fc2" : "") +
                    "; EVA-02 computes its RoPE in code: pass --preset with the model's timm name "
                    "(e.g. eva02_small_patch14_336) for it");
  }
  a.class_token = ts.has("cls_token");
  if (ts.has("dist_token")) {
    a.dist_token = true;
    notes.push_back(
        "distillation token and head_dist (DeiT distilled: the logits are the mean "
        "of both heads, as timm at inference)");
  }
  if (ts.has("reg_token")) {
    const Shape reg = ts.need("reg_token").shape();
    if (reg.size() != 3 || reg[0] != 1 || reg[1] < 1 || reg[1] > 64) {
      throw std::runtime_error(
          ts.path + ": reg_token: expected [1, R, D] with 1 <= R <= 64, found " + reg.str());
    }
    a.reg_tokens = reg[1];
    notes.push_back(std::to_string(a.reg_tokens) + " register tokens (reg_token)");
  }
  if (ts.has("attn_pool.latent")) {
    a.pool = Pool::map;  // SigLIP
    notes.push_back("attention pooling (attn_pool, SigLIP's 'map' head)");
  } else if (ts.has("fc_norm.weight")) {
    a.pool = Pool::avg;
  } else if (!a.class_token) {
    // No class token, no fc_norm, no attention pool: the mean of the normalised tokens (timm's
    // global_pool 'avg' with fc_norm=False, SigLIP's gap variants).
    a.pool = Pool::avg;
    a.norm_before_pool = true;
    notes.push_back("mean pooling of the normalised tokens (no class token, norm before pooling)");
  } else {
    a.pool = Pool::cls;
  }
  if (ts.has("norm_pre.weight")) {
    a.norm_pre = true;  // CLIP's pre-norm
    a.eps = 1e-5f;      // timm builds its CLIP towers with LayerNorm(eps=1e-5)
    notes.push_back("a LayerNorm before the blocks (norm_pre: a CLIP image tower, eps 1e-5)");
    if (hints.mlp.empty())
      out.unsettled.push_back(
          {"the MLP's activation: CLIP towers use GELU (LAION, timm's *_clip_*) or quick_gelu "
           "(OpenAI's and MetaCLIP's weights, timm's *_clip_quickgelu_*); the file does not say, "
           "GELU assumed",
           "--mlp quick_gelu or --mlp gelu, or --preset with the model's timm name (e.g. "
           "vit_base_patch16_clip_quickgelu_224)"});
  }
  if (!hints.mlp.empty()) {
    const Mlp given = parse_mlp(hints.mlp, "--mlp");
    if ((given == Mlp::swiglu) != (a.mlp == Mlp::swiglu)) {
      throw std::runtime_error(ts.path + ": --mlp " + hints.mlp + ", but the MLP's shapes (fc1 " +
                               ts.need("blocks.0.mlp.fc1.weight").shape().str() + ", fc2 " +
                               ts.need("blocks.0.mlp.fc2.weight").shape().str() + ") are " +
                               (a.mlp == Mlp::swiglu ? "SwiGLU's" : "not SwiGLU's"));
    }
    a.mlp = given;
    notes.push_back(std::string("MLP activation '") + mlp_name(given) + "' from the command line");
  }
  a.qkv_bias = ts.has("blocks.0.attn.qkv.bias");
  if (!a.qkv_bias) notes.push_back("no qkv bias (blocks.N.attn.qkv.bias absent)");
  if (c.classes == 0) notes.push_back("no head: the output is the pooled features");
  const bool abs = ts.has("pos_embed");
  const bool rel = ts.has("blocks.0.attn.relative_position_bias_table");
  const bool mixed = ts.has("blocks.0.attn.rope.freqs");  // timm's Eva, rope_type 'mixed'
  const std::string token_part = abs ? "learned1d" : "";
  // A ViT with relative tables is BEiT's: met at another size, its tables resize as timm's.
  const std::string attn_part = rel ? "relbias:resize=beit" : mixed ? "rope-mixed" : "";
  c.encoding = token_part.empty() ? (attn_part.empty() ? "none" : attn_part)
                                  : (attn_part.empty() ? token_part : token_part + "+" + attn_part);
  if (mixed) notes.push_back("RoPE-Mixed frequencies (rope.freqs, timm's Eva RoPE-ViT)");
  const bool dinov3 = !abs && !rel && !mixed && a.class_token && a.reg_tokens > 0;
  if (dinov3) {
    // A class token and registers without position tensors: timm's DINOv3 (its Eva class with
    // rope_type 'dinov3'), the only such model of timm's zoo. Its RoPE is computed in code, its
    // LayerNorms use eps 1e-5 and timm pools the normalised patch tokens by their mean.
    c.family = "dinov3";
    c.encoding = "rope-dinov3";
    a.eps = 1e-5f;
    a.pool = Pool::avg;
    a.norm_before_pool = true;
    notes.push_back(
        "a class token and register tokens without position tensors: timm's DINOv3 "
        "(vit_*_patch16_dinov3), its RoPE on normalised coordinates (rope-dinov3), LayerNorm eps "
        "1e-5, mean pooling of the normalised patch tokens (timm's default; --set pool=cls for "
        "upstream DINOv3's class token)");
  }
  if (!abs && !rel && !mixed && !dinov3 && !hints.encoding_given) {
    out.unsettled.push_back(
        {"the position encoding: the file has no position tensors, and timm's Eva RoPE-ViTs "
         "(vit_*_rope_*) compute their axial RoPE in code; 'none' assumed",
         "--encoding KIND (e.g. --encoding rope-axial), or --preset with the model's timm name"});
  }
  if (hints.heads) {
    a.heads = hints.heads;
  } else if (mixed) {
    a.heads = ts.need("blocks.0.attn.rope.freqs").size(1);  // [2, H, hd/2]
  } else {
    a.heads = a.dim % 64 == 0 ? a.dim / 64 : 1;
    out.unsettled.push_back({"the attention heads (not stored in the file): " +
                                 std::to_string(a.heads) + " assumed (head dim 64)",
                             "--heads N, or --preset with the model's timm name"});
  }
  if (ts.has("blocks.0.ls1.gamma")) {
    a.layer_scale = 1e-6;  // timm's DeiT-III init_values; the file's gammas are loaded
    notes.push_back("layer scale (blocks.N.ls1/ls2.gamma, as timm's DeiT-III)");
  }
  if (!abs && rel && !hints.img_rows) {
    // BEiT: no position table; the first block's relative table covers a (2M-1) x (2M-1) grid
    // of offsets (plus three class entries with a class token): a square M x M patch grid.
    const int64_t rows = ts.need("blocks.0.attn.relative_position_bias_table").size(0) -
                         (a.prefix_tokens() > 0 ? 3 : 0);
    const int64_t side = square_side(rows);
    if (side < 1 || side % 2 == 0) {
      throw std::runtime_error(ts.path + ": blocks.0.attn.relative_position_bias_table has " +
                               std::to_string(rows) +
                               " offset rows, not (2M-1)^2 of a square grid: pass the image size");
    }
    c.img_rows = c.img_cols = (side + 1) / 2 * c.patch;
    notes.push_back("image size " + std::to_string(c.img_rows) +
                    " inferred from the relative position table");
  }
  if (abs) {
    // pos_embed rows: the patch grid, plus a class row unless timm's no_embed_class (DeiT-III)
    // left it out. Only a square grid can be inferred; with the size given, the rows decide.
    const int64_t rows = squeeze_leading(ts.need("pos_embed").shape())[0];
    const int64_t P = a.prefix_tokens();
    int64_t side = square_side(rows - P);
    if (hints.img_rows) {
      const int64_t grid = (hints.img_rows / c.patch) *
                           ((hints.img_cols ? hints.img_cols : hints.img_rows) / c.patch);
      a.no_embed_class = P > 0 && rows == grid;
    } else if (side == 0 && P > 0 && square_side(rows) > 0) {
      side = square_side(rows);
      a.no_embed_class = true;
    }
    if (a.no_embed_class) {
      notes.push_back(
          "pos_embed has no rows for the class or register tokens (timm's "
          "no_embed_class, as DeiT-III)");
    }
    if (!hints.img_rows) {
      if (side == 0) {
        throw std::runtime_error(
            ts.path + ": pos_embed has " + std::to_string(rows) + " rows, not a square grid" +
            (a.class_token ? " with or without a class row" : "") + ": pass the image size");
      }
      c.img_rows = c.img_cols = side * c.patch;
      notes.push_back("image size " + std::to_string(c.img_rows) + " inferred from pos_embed");
    }
  }
  notes.push_back("config inferred from tensor shapes");
}

// torchvision's transform for its ViT weights (IMAGENET1K_V1): resize 256 (vit_l_16: 242)
// bilinear, centre crop 224, ImageNet mean/std; the same ratio at other sizes.
void torchvision_preprocessing(ModelConfig& c, std::vector<std::string>& notes) {
  if (c.channels != 3) return;  // no published statistics; 0.5 set above
  int64_t resize = 256;         // vit_b_16, vit_b_32, vit_l_32
  std::string name = "vit_b_16";
  if (c.vit().dim == 1024 && c.patch == 16) resize = 242, name = "vit_l_16";
  const int64_t crop = 224;
  c.preprocess.crop_pct = static_cast<double>(crop) / static_cast<double>(resize);
  c.preprocess.interpolation = Interpolation::bilinear;
  notes.push_back("preprocessing: torchvision's " + name + " IMAGENET1K_V1 transform (resize " +
                  std::to_string(resize) + " bilinear, centre crop " + std::to_string(crop) +
                  ", ImageNet mean/std; the same ratio at other sizes)");
}

void timm_preprocessing(ModelConfig& c, std::vector<std::string>& notes, const InferHints& hints) {
  if (c.channels != 3) return;
  if (c.family == "dinov3") {
    // Every DINOv3 weight of timm's (lvd1689m, sat493m) has the same preprocessing.
    c.preprocess.crop_pct = 1.0;
    if (!hints.img_rows) c.img_rows = c.img_cols = 256;
    notes.push_back("preprocessing: timm's DINOv3 weights' (ImageNet mean/std, bicubic, crop 1.0" +
                    std::string(hints.img_rows ? ")" : ", 256 x 256)"));
    return;
  }
  notes.push_back(
      "preprocessing not stored in the file: ImageNet mean/std, crop 0.875, bicubic; timm's ViT "
      "weights differ by tag (augreg: mean = std = 0.5, crop 0.9): keep timm's config.json beside "
      "the file, or pass --preset, --mean, --std, --crop-pct");
}

InferredConfig infer(const TensorMap& tensors, const InferHints& hints, const std::string& path,
                     bool torchvision) {
  const TensorSet ts(tensors, path);
  InferredConfig out;
  out.config = blank();
  out.config.vit().dim = infer_common(out.config, ts, "head.weight", hints);
  infer_vit(out, ts, hints);
  if (torchvision) {
    torchvision_preprocessing(out.config, out.notes);
  } else {
    timm_preprocessing(out.config, out.notes, hints);
  }
  return out;
}

}  // namespace

std::vector<CheckpointDialect> dialects() {
  CheckpointDialect tv;
  tv.name = "torchvision ViT";
  tv.recognise = [](const std::vector<std::string>& names) {
    for (const auto& n : names) {
      if (starts_with(n, "encoder.layers.") || n == "conv_proj.weight") return 1;
    }
    return 0;
  };
  tv.map_name = torchvision_name;
  tv.infer = [](const TensorMap& t, const InferHints& h, const std::string& p) {
    return infer(t, h, p, true);
  };
  CheckpointDialect timm;
  timm.name = "timm ViT";
  timm.recognise = [](const std::vector<std::string>& names) {
    return any_starts_with(names, "blocks.") ? 1 : 0;
  };
  timm.map_name = timm_name;
  timm.prepare = prepare_timm;
  timm.infer = [](const TensorMap& t, const InferHints& h, const std::string& p) {
    return infer(t, h, p, false);
  };
  return {tv, timm};
}

void check_tensors(const ModelConfig& c, const TensorMap& tensors, const std::string& path) {
  const TensorSet ts(tensors, path);
  check_common_tensors(c, c.vit().dim, ts, "head.weight");
  check_matches(path, "depth", c.vit().depth, count_blocks(ts.names, "blocks."));
  check_matches(path, "mlp_dim", c.vit().mlp_dim, ts.need("blocks.0.mlp.fc2.weight").size(1));
}

}  // namespace vitpe::vit_family
