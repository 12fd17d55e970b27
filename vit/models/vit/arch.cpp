// The ViT family's architecture struct: names of its enums, its JSON fields, validation, the
// description of a config without a label, `vitpe info`'s lines and where its encodings work.
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vit/models/vit/vit_family.h"

namespace vitpe {

const char* pool_name(Pool p) {
  switch (p) {
    case Pool::cls:
      return "cls";
    case Pool::avg:
      return "avg";
    case Pool::map:
      return "map";
  }
  return "?";
}

Pool parse_pool(const std::string& name, const std::string& what) {
  for (Pool p : {Pool::cls, Pool::avg, Pool::map}) {
    if (name == pool_name(p)) return p;
  }
  throw std::invalid_argument(what + " must be 'cls', 'avg' or 'map', found '" + name + "'");
}

const char* mlp_name(Mlp m) {
  switch (m) {
    case Mlp::gelu:
      return "gelu";
    case Mlp::swiglu:
      return "swiglu";
    case Mlp::quick_gelu:
      return "quick_gelu";
  }
  return "?";
}

Mlp parse_mlp(const std::string& name, const std::string& what) {
  for (Mlp m : {Mlp::gelu, Mlp::swiglu, Mlp::quick_gelu}) {
    if (name == mlp_name(m)) return m;
  }
  throw std::invalid_argument(what + " must be 'gelu', 'swiglu' or 'quick_gelu', found '" + name +
                              "'");
}

namespace vit_family {

ModelConfig blank() {
  ModelConfig c;
  c.family = "vit";
  c.arch = VitArch{};
  return c;
}

void arch_to_json(const ModelConfig& c, nlohmann::json& j) {
  const VitArch& a = c.vit();
  j["dim"] = a.dim;
  j["depth"] = a.depth;
  j["heads"] = a.heads;
  j["mlp_dim"] = a.mlp_dim;
  j["mlp"] = mlp_name(a.mlp);
  j["mlp_norm"] = a.mlp_norm;
  j["pool"] = pool_name(a.pool);
  j["norm_before_pool"] = a.norm_before_pool;
  j["class_token"] = a.class_token;
  j["norm_pre"] = a.norm_pre;
  j["qkv_bias"] = a.qkv_bias;
  j["layer_scale"] = a.layer_scale;
  j["no_embed_class"] = a.no_embed_class;
  j["reg_tokens"] = a.reg_tokens;
  j["dist_token"] = a.dist_token;
  j["eps"] = a.eps;
}

void arch_from_json(const nlohmann::json& j, ModelConfig& c) {
  VitArch& a = c.vit();
  a.dim = json_integer(j, "dim");
  a.depth = json_integer(j, "depth");
  a.heads = json_integer(j, "heads");
  a.mlp_dim = json_integer(j, "mlp_dim");
  a.eps = static_cast<float>(json_number(j, "eps"));
  a.pool = parse_pool(json_string(j, "pool"), "model config: pool");
  // Fields added since the first files, at the values those files meant.
  a.class_token = json_bool(j, "class_token", true);
  a.layer_scale = json_number(j, "layer_scale", 0.0);
  a.no_embed_class = json_bool(j, "no_embed_class", false);
  a.reg_tokens = json_integer(j, "reg_tokens", 0);
  a.dist_token = json_bool(j, "dist_token", false);
  a.mlp = parse_mlp(json_string(j, "mlp", "gelu"), "model config: mlp");
  a.mlp_norm = json_bool(j, "mlp_norm", false);
  a.norm_before_pool = json_bool(j, "norm_before_pool", false);
  a.norm_pre = json_bool(j, "norm_pre", false);
  a.qkv_bias = json_bool(j, "qkv_bias", true);
}

void validate(const ModelConfig& c, const std::function<void(const std::string&)>& fail) {
  const VitArch& a = c.vit();
  // Sizes are bounded so that a config (from a file's metadata or --set) cannot make the model
  // allocate without limit before any tensor is checked; the bounds are far past any real model.
  check_range(fail, "dim", a.dim, 1, 1 << 16);
  check_range(fail, "depth", a.depth, 1, 1024);
  check_range(fail, "heads", a.heads, 1, a.dim);
  check_range(fail, "mlp_dim", a.mlp_dim, 1, 1 << 20);
  if (a.dim % a.heads) {
    fail("dim " + std::to_string(a.dim) + " is not divisible by heads " + std::to_string(a.heads));
  }
  if (!(a.eps > 0 && a.eps < 1)) fail("eps must be in (0, 1), found " + std::to_string(a.eps));
  if (!a.class_token && a.pool == Pool::cls) fail("pool 'cls' needs a class token");
  if (a.norm_before_pool && a.pool != Pool::avg) {
    fail("norm_before_pool goes with pool 'avg' (the others always normalise the tokens first), "
         "found pool '" +
         std::string(pool_name(a.pool)) + "'");
  }
  if (a.mlp_norm && a.mlp != Mlp::swiglu) fail("mlp_norm goes with mlp 'swiglu' (EVA-02)");
  check_range(fail, "reg_tokens", a.reg_tokens, 0, 64);
  if (a.dist_token && (!a.class_token || a.pool != Pool::cls || a.reg_tokens != 0)) {
    fail("dist_token needs a class token and class-token pooling, and no registers (DeiT)");
  }
  if (!(a.layer_scale >= 0 && a.layer_scale <= 1e3)) {
    fail("layer_scale must be in [0, 1000] (0: none), found " + std::to_string(a.layer_scale));
  }
}

std::string describe(const ModelConfig& c) {
  const VitArch& a = c.vit();
  const bool ls = a.layer_scale > 0, nec = a.no_embed_class && a.prefix_tokens() > 0;
  const std::string reg =
      a.reg_tokens ? " + " + std::to_string(a.reg_tokens) + " register tokens" : "";
  if (ls && a.class_token && a.pool == Pool::avg && c.encoding.has("relbias")) return "BEiT";
  if (a.dist_token) return std::string("DeiT distilled") + (ls ? " with layer scale" : "");
  if (a.mlp == Mlp::swiglu)
    return std::string("EVA-02") + (a.mlp_norm ? " (SwiGLU with norm)" : "");
  const bool mixed = c.encoding.has("rope-mixed");
  if ((mixed || c.encoding.has("rope-axial")) && ls) {
    // timm's Eva class as RoPE-ViT (class token) or its sbb recipes (registers, mean pooling);
    // an absolute table beside the rotation is RoPE-ViT's APE variant.
    const bool ape = c.encoding.part(EncodingSite::token) != nullptr;
    return std::string("RoPE-ViT (Eva) ") + (mixed ? "mixed" : "axial") + (ape ? " + APE" : "") +
           reg;
  }
  if (a.norm_pre) return std::string("ViT with pre-norm (CLIP)") + reg;
  if (a.pool == Pool::map) return "ViT with attention pooling" + reg;
  if (ls && nec && a.class_token && !a.reg_tokens) return "DeiT-III";
  if (ls && nec) return "ViT with layer scale, pos_embed without prefix rows" + reg;
  if (ls) return "ViT with layer scale" + reg;
  if (nec) return "ViT, pos_embed without prefix rows" + reg;
  return "ViT" + reg;
}

std::vector<std::pair<std::string, std::string>> info(const ModelConfig& c) {
  const VitArch& a = c.vit();
  std::string pooling = a.pool == Pool::cls   ? "class token"
                        : a.pool == Pool::map ? "attention pooling (attn_pool)"
                        : a.norm_before_pool  ? "mean of the normalised tokens"
                                              : "mean (fc_norm)";
  if (c.classes == 0) pooling += "; no head (the output is the pooled features)";
  std::string tokens = "class token " + std::string(a.class_token ? "yes" : "no");
  if (a.dist_token) tokens += ", distillation token";
  if (a.reg_tokens) tokens += ", " + std::to_string(a.reg_tokens) + " register tokens";
  std::string block = "mlp " + std::string(mlp_name(a.mlp)) + (a.mlp_norm ? " with norm" : "");
  if (a.layer_scale > 0) block += ", layer scale (init " + std::to_string(a.layer_scale) + ")";
  if (!a.qkv_bias) block += ", no qkv bias";
  if (a.norm_pre) block += "; a LayerNorm before the blocks (norm_pre)";
  return {{"width", std::to_string(a.dim) + ", depth " + std::to_string(a.depth) + ", heads " +
                        std::to_string(a.heads) + ", mlp " + std::to_string(a.mlp_dim)},
          {"pooling", pooling},
          {"tokens", tokens},
          {"blocks", block}};
}

int64_t token_prefix(const ModelConfig& c) {
  // no_embed_class: the token encoding sees the patch tokens only (timm adds pos_embed before
  // prepending the class token).
  return c.vit().no_embed_class ? 0 : c.vit().prefix_tokens();
}

std::vector<AttentionSite> attention_sites(const ModelConfig& c) {
  const VitArch& a = c.vit();
  std::vector<AttentionSite> out;
  for (int64_t i = 0; i < a.depth; ++i) {
    out.push_back({a.heads, a.dim / a.heads, AttnGeometry{c.patch_grid(), a.prefix_tokens()},
                   "blocks." + std::to_string(i) + "."});
  }
  return out;
}

}  // namespace vit_family
}  // namespace vitpe
