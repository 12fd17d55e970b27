// ModelConfig: presets by name, validation, JSON round trip (stored in our checkpoints).
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "encodings/encoding.h"
#include "ops/util.h"
#include "vit/models/model.h"

namespace vitpe {

namespace {

ModelConfig vit(int64_t dim, int64_t depth, int64_t heads) {
  ModelConfig c;
  c.kind = ModelKind::vit;
  c.dim = dim;
  c.depth = depth;
  c.heads = heads;
  c.mlp_dim = 4 * dim;
  return c;
}

ModelConfig swin(int64_t patch, int64_t dim, std::vector<int64_t> depths,
                 std::vector<int64_t> heads) {
  ModelConfig c;
  c.kind = ModelKind::swin;
  c.encoding = "relbias";
  c.pool = Pool::avg;
  c.class_token = false;
  c.eps = 1e-5f;
  c.window = 7;
  c.patch = patch;
  c.dim = dim;
  c.depths = std::move(depths);
  c.stage_heads = std::move(heads);
  // ViT fields Swin does not use, set so that a shared reader finds consistent values.
  c.depth = 0;
  c.heads = c.stage_heads[0];
  c.mlp_dim = static_cast<int64_t>(c.dim * c.mlp_ratio);
  return c;
}

ModelConfig fashion_mnist(ModelConfig c) {
  c.img_rows = c.img_cols = 28;
  c.channels = 1;
  c.classes = 10;
  c.crop_pct = 1.0;
  c.mean = {kFashionMnistMean};
  c.std_dev = {kFashionMnistStd};
  c.labels = kFashionMnistLabels;
  return c;
}

ModelConfig vit_fmnist() {
  ModelConfig c = fashion_mnist(vit(128, 6, 4));
  c.patch = 4;
  c.mlp_dim = 512;
  // Global average pooling, no class token (Beyer et al., "Better plain ViT baselines", the
  // recipe sincos2d comes from): on Fashion-MNIST it is ahead of the class token at every
  // epoch of the same 15-epoch run, 90.66 % against 89.57 % at the end (README, runs C, D).
  c.pool = Pool::avg;
  c.class_token = false;
  return c;
}

// timm's preprocessing for its ViT presets' default weights (the augreg tags): mean = std = 0.5,
// crop 0.9, bicubic.
ModelConfig timm_vit(int64_t dim, int64_t depth, int64_t heads) {
  ModelConfig c = vit(dim, depth, heads);
  c.labels = imagenet_labels();
  c.mean = c.std_dev = {0.5f, 0.5f, 0.5f};
  c.crop_pct = 0.9;
  return c;
}

// timm's DeiT (Touvron et al. 2021; deit_*): plain ViT, or with the distillation token and
// head_dist; its fb_in1k weights use ImageNet statistics, bicubic, crop 0.9 at 224, 1.0 at 384.
ModelConfig timm_deit(int64_t dim, int64_t heads, int64_t size, bool distilled) {
  ModelConfig c = vit(dim, 12, heads);
  c.img_rows = c.img_cols = size;
  c.dist_token = distilled;
  c.labels = imagenet_labels();
  c.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's BEiT (Bao et al. 2022; beit_*): no position table, a relative position bias in every
// block with BEiT's three class-token entries (our relbias with a prefix, resized at other sizes
// with timm's geometric scheme), layer scale 0.1, mean
// pooling with fc_norm; its weights use mean = std = 0.5, bicubic, crop 0.9 at 224, 1.0 at 384.
ModelConfig timm_beit(int64_t dim, int64_t depth, int64_t heads, int64_t size) {
  ModelConfig c = timm_vit(dim, depth, heads);
  c.img_rows = c.img_cols = size;
  c.encoding = "relbias:resize=beit";  // at other sizes the tables resize as timm's BEiT
  c.pool = Pool::avg;
  c.layer_scale = 0.1;
  c.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's DeiT-III (Touvron et al. 2022; deit3_*): ViT with layer scale (init 1e-6) and a
// position table without a class row; its fb_in1k weights use ImageNet statistics, bicubic, crop
// 0.9 at 224 and 1.0 at 384.
ModelConfig timm_deit3(int64_t dim, int64_t depth, int64_t heads, int64_t patch, int64_t size) {
  ModelConfig c = vit(dim, depth, heads);
  c.patch = patch;
  c.img_rows = c.img_cols = size;
  c.layer_scale = 1e-6;
  c.no_embed_class = true;
  c.labels = imagenet_labels();
  c.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's vit_*_patch16_reg4_gap_256 (the "sbb" recipes): no class token, 4 register tokens
// without position rows, mean pooling with fc_norm; medium and betwixt with layer scale 1e-5 and
// crop 0.95 (their sbb weights), base without (untrained in timm: its defaults, crop 0.9).
ModelConfig timm_reg4_gap(int64_t dim, int64_t heads, double layer_scale, double crop) {
  ModelConfig c = timm_vit(dim, 12, heads);
  c.img_rows = c.img_cols = 256;
  c.class_token = false;
  c.pool = Pool::avg;
  c.reg_tokens = 4;
  c.no_embed_class = true;
  c.layer_scale = layer_scale;
  c.crop_pct = crop;
  return c;
}

// timm's RoPE-ViT (Heo et al. 2024; vit_*_patch16_rope[_mixed][_ape]_224, timm's Eva class): a
// class token and class-token pooling, layer scale 1e-5, rotary embedding in every block: axial
// with theta 100 (timm's rope_temperature; 'xy' indexing) or mixed (learned frequencies, theta
// 10 for their init); the _ape variants add a learned position table without a class row. Its
// weights use ImageNet statistics, bicubic, crop 0.9.
ModelConfig timm_rope_vit(int64_t dim, int64_t depth, int64_t heads, bool mixed, bool ape) {
  ModelConfig c = vit(dim, depth, heads);
  c.layer_scale = 1e-5;
  c.encoding = std::string(ape ? "learned1d+" : "") + (mixed ? "rope-mixed" : "rope-axial");
  c.no_embed_class = ape;
  c.labels = imagenet_labels();
  c.crop_pct = 0.9;
  return c;
}

// timm's vit_*_patch16_rope_reg*_gap_256 (Eva class, the "sbb" recipes): no class token,
// register tokens, mean pooling with fc_norm, layer scale 1e-5, q and v biases, axial RoPE with
// timm's Eva defaults (theta 10000, 'ij' indexing: rows on the first half of the pairs) and
// ref_feat_shape 16x16 (coordinates rescaled to a 16x16 grid at other sizes); crop 0.95, mean
// = std = 0.5 except betwixt (OpenAI CLIP's statistics).
ModelConfig timm_rope_reg_gap(int64_t dim, int64_t depth, int64_t heads, int64_t reg) {
  ModelConfig c = timm_vit(dim, depth, heads);
  c.img_rows = c.img_cols = 256;
  c.class_token = false;
  c.pool = Pool::avg;
  c.reg_tokens = reg;
  c.layer_scale = 1e-5;
  c.encoding = "rope-axial:theta=10000,indexing=ij,ref=16x16";
  c.crop_pct = 0.95;
  if (dim == 640) {
    c.mean = {0.48145466f, 0.4578275f, 0.40821073f};
    c.std_dev = {0.26862954f, 0.26130258f, 0.27577711f};
  }
  return c;
}

// timm's EVA-02 fine-tuned on ImageNet-1k (eva02_*_patch14_{336,448}, Fang et al. 2023): class
// token, a position table with its class row, mean pooling with fc_norm, q and v biases,
// SwiGLU MLPs of 8/3 the width (base and large: separate gate/value projections and a norm
// before fc2, and q/k/v as separate projections, fused here on load), axial RoPE with timm's
// Eva defaults (theta 10000, 'ij') and ref_feat_shape 16x16 at every size; OpenAI CLIP's
// statistics, crop 1.0 (centre at 336, squash at 448).
ModelConfig timm_eva02(int64_t dim, int64_t depth, int64_t heads, int64_t size) {
  ModelConfig c = vit(dim, depth, heads);
  c.patch = 14;
  c.img_rows = c.img_cols = size;
  c.pool = Pool::avg;
  c.mlp = "swiglu";
  c.mlp_dim = dim * 8 / 3;
  c.mlp_norm = dim >= 768;
  c.encoding = "learned1d+rope-axial:theta=10000,indexing=ij,ref=16x16";
  c.labels = imagenet_labels();
  c.mean = {0.48145466f, 0.4578275f, 0.40821073f};
  c.std_dev = {0.26862954f, 0.26130258f, 0.27577711f};
  c.crop_pct = 1.0;
  c.crop_mode = size == 448 ? "squash" : "center";
  return c;
}

// timm's ViT at another patch or size: the augreg weights' preprocessing, crop 1.0 at 384.
ModelConfig timm_vit_at(int64_t dim, int64_t depth, int64_t heads, int64_t patch, int64_t size) {
  ModelConfig c = timm_vit(dim, depth, heads);
  c.patch = patch;
  c.img_rows = c.img_cols = size;
  c.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's Swin default weights (ms_in1k / ms_in22k_ft_in1k): ImageNet statistics, bicubic, crop
// 0.9 at 224 (window 7), 1.0 at 384 (window 12).
ModelConfig timm_swin(int64_t dim, std::vector<int64_t> depths, std::vector<int64_t> heads,
                      int64_t window, int64_t size) {
  ModelConfig c = swin(4, dim, std::move(depths), std::move(heads));
  c.window = window;
  c.img_rows = c.img_cols = size;
  c.crop_pct = size == 224 ? 0.9 : 1.0;
  c.labels = imagenet_labels();
  return c;
}

// timm's Swin V2 at 256 (swinv2_*_window{8,16}_256): post-norm blocks, cosine attention, the
// continuous position bias (cpb; pretrained_window_size 0: coordinates normalised by each
// window); its weights use ImageNet statistics, bicubic, crop 0.9. A window larger than a stage's
// grid is clamped to it (window 16: the last stage attends over its 8 x 8 grid).
ModelConfig timm_swinv2(int64_t dim, std::vector<int64_t> depths, std::vector<int64_t> heads,
                        int64_t window) {
  ModelConfig c = timm_swin(dim, std::move(depths), std::move(heads), window, 256);
  c.swin_v2 = true;
  c.encoding = "cpb";
  c.crop_pct = 0.9;
  return c;
}

// The preset registry: timm's model names (with the preprocessing of timm's default weights for
// that name, `timm.create_model(name).pretrained_cfg`), an alias in vitpe's earlier spelling, and
// our small models; in the order `--help` lists them.
struct PresetEntry {
  const char* name;
  const char* alias;  // "" for none
  ModelConfig (*make)();
};
// clang-format off
const PresetEntry kPresets[] = {
    {"vit_tiny_patch16_224",         "vit-tiny-patch16-224",         [] { return timm_vit(192, 12, 3); }},
    {"vit_small_patch16_224",        "vit-small-patch16-224",        [] { return timm_vit(384, 12, 6); }},
    {"vit_base_patch16_224",         "vit-base-patch16-224",         [] { return timm_vit(768, 12, 12); }},
    {"vit_tiny_patch16_384",         "",                             [] { return timm_vit_at(192, 12, 3, 16, 384); }},
    {"vit_small_patch16_384",        "",                             [] { return timm_vit_at(384, 12, 6, 16, 384); }},
    {"vit_small_patch32_224",        "",                             [] { return timm_vit_at(384, 12, 6, 32, 224); }},
    {"vit_small_patch32_384",        "",                             [] { return timm_vit_at(384, 12, 6, 32, 384); }},
    {"vit_base_patch16_384",         "",                             [] { return timm_vit_at(768, 12, 12, 16, 384); }},
    {"vit_base_patch32_224",         "",                             [] { return timm_vit_at(768, 12, 12, 32, 224); }},
    {"vit_base_patch32_384",         "",                             [] { return timm_vit_at(768, 12, 12, 32, 384); }},
    {"vit_large_patch16_224",        "",                             [] { return timm_vit_at(1024, 24, 16, 16, 224); }},
    {"vit_large_patch16_384",        "",                             [] { return timm_vit_at(1024, 24, 16, 16, 384); }},
    {"vit_large_patch32_384",        "",                             [] { return timm_vit_at(1024, 24, 16, 32, 384); }},
    {"deit_tiny_patch16_224",        "",                             [] { return timm_deit(192, 3, 224, false); }},
    {"deit_small_patch16_224",       "",                             [] { return timm_deit(384, 6, 224, false); }},
    {"deit_base_patch16_224",        "",                             [] { return timm_deit(768, 12, 224, false); }},
    {"deit_base_patch16_384",        "",                             [] { return timm_deit(768, 12, 384, false); }},
    {"deit_tiny_distilled_patch16_224",  "",                         [] { return timm_deit(192, 3, 224, true); }},
    {"deit_small_distilled_patch16_224", "",                         [] { return timm_deit(384, 6, 224, true); }},
    {"deit_base_distilled_patch16_224",  "",                         [] { return timm_deit(768, 12, 224, true); }},
    {"deit_base_distilled_patch16_384",  "",                         [] { return timm_deit(768, 12, 384, true); }},
    {"beit_base_patch16_224",        "",                             [] { return timm_beit(768, 12, 12, 224); }},
    {"beit_base_patch16_384",        "",                             [] { return timm_beit(768, 12, 12, 384); }},
    {"beit_large_patch16_224",       "",                             [] { return timm_beit(1024, 24, 16, 224); }},
    {"deit3_small_patch16_224",      "",                             [] { return timm_deit3(384, 12, 6, 16, 224); }},
    {"deit3_small_patch16_384",      "",                             [] { return timm_deit3(384, 12, 6, 16, 384); }},
    {"deit3_medium_patch16_224",     "",                             [] { return timm_deit3(512, 12, 8, 16, 224); }},
    {"deit3_base_patch16_224",       "",                             [] { return timm_deit3(768, 12, 12, 16, 224); }},
    {"deit3_base_patch16_384",       "",                             [] { return timm_deit3(768, 12, 12, 16, 384); }},
    {"deit3_large_patch16_224",      "",                             [] { return timm_deit3(1024, 24, 16, 16, 224); }},
    {"deit3_large_patch16_384",      "",                             [] { return timm_deit3(1024, 24, 16, 16, 384); }},
    {"deit3_huge_patch14_224",       "",                             [] { return timm_deit3(1280, 32, 16, 14, 224); }},
    {"vit_medium_patch16_reg4_gap_256",  "",                         [] { return timm_reg4_gap(512, 8, 1e-5, 0.95); }},
    {"vit_betwixt_patch16_reg4_gap_256", "",                         [] { return timm_reg4_gap(640, 10, 1e-5, 0.95); }},
    {"vit_base_patch16_reg4_gap_256",    "",                         [] { return timm_reg4_gap(768, 12, 0, 0.9); }},
    {"vit_small_patch16_rope_224",          "", [] { return timm_rope_vit(384, 12, 6, false, false); }},
    {"vit_small_patch16_rope_mixed_224",    "", [] { return timm_rope_vit(384, 12, 6, true, false); }},
    {"vit_small_patch16_rope_ape_224",      "", [] { return timm_rope_vit(384, 12, 6, false, true); }},
    {"vit_small_patch16_rope_mixed_ape_224", "", [] { return timm_rope_vit(384, 12, 6, true, true); }},
    {"vit_base_patch16_rope_224",           "", [] { return timm_rope_vit(768, 12, 12, false, false); }},
    {"vit_base_patch16_rope_mixed_224",     "", [] { return timm_rope_vit(768, 12, 12, true, false); }},
    {"vit_base_patch16_rope_ape_224",       "", [] { return timm_rope_vit(768, 12, 12, false, true); }},
    {"vit_base_patch16_rope_mixed_ape_224", "", [] { return timm_rope_vit(768, 12, 12, true, true); }},
    {"vit_large_patch16_rope_224",          "", [] { return timm_rope_vit(1024, 24, 16, false, false); }},
    {"vit_large_patch16_rope_mixed_224",    "", [] { return timm_rope_vit(1024, 24, 16, true, false); }},
    {"vit_large_patch16_rope_ape_224",      "", [] { return timm_rope_vit(1024, 24, 16, false, true); }},
    {"vit_large_patch16_rope_mixed_ape_224", "", [] { return timm_rope_vit(1024, 24, 16, true, true); }},
    {"vit_medium_patch16_rope_reg1_gap_256",  "", [] { return timm_rope_reg_gap(512, 12, 8, 1); }},
    {"vit_mediumd_patch16_rope_reg1_gap_256", "", [] { return timm_rope_reg_gap(512, 20, 8, 1); }},
    {"vit_betwixt_patch16_rope_reg4_gap_256", "", [] { return timm_rope_reg_gap(640, 12, 10, 4); }},
    {"vit_base_patch16_rope_reg1_gap_256",    "", [] { return timm_rope_reg_gap(768, 12, 12, 1); }},
    {"eva02_tiny_patch14_336",          "", [] { return timm_eva02(192, 12, 3, 336); }},
    {"eva02_small_patch14_336",         "", [] { return timm_eva02(384, 12, 6, 336); }},
    {"eva02_base_patch14_448",          "", [] { return timm_eva02(768, 12, 12, 448); }},
    {"eva02_large_patch14_448",         "", [] { return timm_eva02(1024, 24, 16, 448); }},
    {"swin_tiny_patch4_window7_224", "swin-tiny-patch4-window7-224", [] { return timm_swin(96, {2, 2, 6, 2}, {3, 6, 12, 24}, 7, 224); }},
    {"swin_small_patch4_window7_224",  "",                           [] { return timm_swin(96, {2, 2, 18, 2}, {3, 6, 12, 24}, 7, 224); }},
    {"swin_base_patch4_window7_224",   "",                           [] { return timm_swin(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 7, 224); }},
    {"swin_base_patch4_window12_384",  "",                           [] { return timm_swin(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 12, 384); }},
    {"swin_large_patch4_window7_224",  "",                           [] { return timm_swin(192, {2, 2, 18, 2}, {6, 12, 24, 48}, 7, 224); }},
    {"swin_large_patch4_window12_384", "",                           [] { return timm_swin(192, {2, 2, 18, 2}, {6, 12, 24, 48}, 12, 384); }},
    {"swinv2_tiny_window8_256",         "", [] { return timm_swinv2(96, {2, 2, 6, 2}, {3, 6, 12, 24}, 8); }},
    {"swinv2_tiny_window16_256",        "", [] { return timm_swinv2(96, {2, 2, 6, 2}, {3, 6, 12, 24}, 16); }},
    {"swinv2_small_window8_256",        "", [] { return timm_swinv2(96, {2, 2, 18, 2}, {3, 6, 12, 24}, 8); }},
    {"swinv2_small_window16_256",       "", [] { return timm_swinv2(96, {2, 2, 18, 2}, {3, 6, 12, 24}, 16); }},
    {"swinv2_base_window8_256",         "", [] { return timm_swinv2(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 8); }},
    {"swinv2_base_window16_256",        "", [] { return timm_swinv2(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 16); }},
    {"vit-fmnist",                   "",                             vit_fmnist},
    {"swin-fmnist",                  "",                             [] { return fashion_mnist(swin(2, 64, {2, 2}, {2, 4})); }},
};
// clang-format on

const PresetEntry* find_preset(const std::string& name) {
  for (const PresetEntry& p : kPresets) {
    if (name == p.name || (p.alias[0] != '\0' && name == p.alias)) return &p;
  }
  return nullptr;
}

// Levenshtein distance, for suggesting the closest preset names.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const PresetEntry& p : kPresets) names.emplace_back(p.name);
  return names;
}

bool is_preset(const std::string& name) { return find_preset(name) != nullptr; }

std::vector<std::string> closest_presets(const std::string& name, size_t most) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const PresetEntry& p : kPresets) {
    size_t d = edit_distance(name, p.name);
    if (p.alias[0] != '\0') d = std::min(d, edit_distance(name, p.alias));
    // A shortened name ("swin_tiny") is as good as a near miss.
    if (name.size() >= 3 && std::string(p.name).rfind(name, 0) == 0) d = 0;
    scored.emplace_back(d, p.name);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, n] : scored) {
    // Close enough to be a misspelling (at most a third of the letters differ), and about as
    // close as the closest.
    if (out.size() < most && d <= std::max<size_t>(2, name.size() / 3) &&
        d <= scored.front().first + 1) {
      out.push_back(n);
    }
  }
  return out;
}

std::string model_family(const ModelConfig& c) {
  if (c.kind == ModelKind::swin) return c.swin_v2 ? "Swin V2" : "Swin";
  const bool ls = c.layer_scale > 0, nec = c.no_embed_class && c.prefix_tokens() > 0;
  const std::string reg =
      c.reg_tokens ? " + " + std::to_string(c.reg_tokens) + " register tokens" : "";
  if (ls && c.class_token && c.pool == Pool::avg && c.encoding.rfind("relbias", 0) == 0) {
    return "BEiT";
  }
  if (c.dist_token) return std::string("DeiT distilled") + (ls ? " with layer scale" : "");
  if (c.mlp == "swiglu") return "EVA-02" + std::string(c.mlp_norm ? " (SwiGLU with norm)" : "");
  if (c.encoding.find("rope-") != std::string::npos && ls) {
    // timm's Eva class as RoPE-ViT (class token) or its sbb recipes (registers, mean pooling).
    const bool mixed = c.encoding.find("rope-mixed") != std::string::npos;
    const bool ape = c.encoding.find('+') != std::string::npos;
    return std::string("RoPE-ViT (Eva) ") + (mixed ? "mixed" : "axial") + (ape ? " + APE" : "") +
           reg;
  }
  if (ls && nec && c.class_token && !c.reg_tokens) return "DeiT-III";
  if (ls && nec) return "ViT with layer scale, pos_embed without prefix rows" + reg;
  if (ls) return "ViT with layer scale" + reg;
  if (nec) return "ViT, pos_embed without prefix rows" + reg;
  return "ViT" + reg;
}

ModelConfig preset(const std::string& name) {
  if (const PresetEntry* p = find_preset(name)) {
    ModelConfig c = p->make();
    c.name = p->name;
    return c;
  }
  const std::vector<std::string> close = closest_presets(name, 3);
  throw std::invalid_argument("unknown model preset '" + name + "'" +
                              (close.empty() ? "" : "; did you mean " + join(close, " or ") + "?") +
                              " (known: " + join(preset_names(), ", ") + ")");
}

void ModelConfig::validate() const {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("model config" + (name.empty() ? "" : " '" + name + "'") + ": " +
                                what);
  };
  // Sizes are bounded so that a config (from a file's metadata or --set) cannot make the model
  // allocate without limit before any tensor is checked; the bounds are far past any real model.
  auto in_range = [&](int64_t v, int64_t most, const char* field) {
    if (v <= 0 || v > most) {
      fail(std::string(field) + " must be in 1.." + std::to_string(most) + ", found " +
           std::to_string(v));
    }
  };
  in_range(img_rows, 16384, "img_rows");
  in_range(img_cols, 16384, "img_cols");
  in_range(channels, 64, "channels");
  in_range(patch, 1024, "patch");
  in_range(classes, 1 << 24, "classes");
  in_range(dim, 1 << 16, "dim");
  if (img_rows % patch || img_cols % patch) {
    fail("image size " + std::to_string(img_rows) + "x" + std::to_string(img_cols) +
         " is not a multiple of the patch size " + std::to_string(patch));
  }
  if (static_cast<int64_t>(mean.size()) != channels ||
      static_cast<int64_t>(std_dev.size()) != channels) {
    fail("mean/std need " + std::to_string(channels) + " values (one per channel), found " +
         std::to_string(mean.size()) + "/" + std::to_string(std_dev.size()));
  }
  if (!labels.empty() && static_cast<int64_t>(labels.size()) != classes) {
    fail("labels: expected " + std::to_string(classes) + " names, found " +
         std::to_string(labels.size()));
  }
  if (!(eps > 0 && eps < 1)) fail("eps must be in (0, 1), found " + std::to_string(eps));
  if (!(crop_pct > 0 && crop_pct <= 4)) {
    fail("crop_pct must be in (0, 4], found " + std::to_string(crop_pct));
  }
  if (crop_mode != "center" && crop_mode != "squash") {
    fail("crop_mode must be 'center' or 'squash' (timm's 'border' is not supported), found '" +
         crop_mode + "'");
  }
  if (interpolation != "bicubic" && interpolation != "bilinear") {
    fail("interpolation must be 'bicubic' or 'bilinear', found '" + interpolation + "'");
  }
  for (size_t i = 0; i < mean.size(); ++i) {
    if (!std::isfinite(mean[i]) || !(std_dev[i] > 0) || !std::isfinite(std_dev[i])) {
      fail("channel " + std::to_string(i) + ": mean must be finite and std positive, found " +
           std::to_string(mean[i]) + " and " + std::to_string(std_dev[i]));
    }
  }
  parse_encoding(encoding);  // throws with the list of known kinds
  if (kind == ModelKind::vit) {
    in_range(depth, 1024, "depth");
    in_range(heads, dim, "heads");
    in_range(mlp_dim, 1 << 20, "mlp_dim");
    if (dim % heads) {
      fail("dim " + std::to_string(dim) + " is not divisible by heads " + std::to_string(heads));
    }
    if (!class_token && pool == Pool::cls) fail("pool 'cls' needs a class token");
    if (swin_v2) fail("swin_v2 is a Swin option (kind 'swin')");
    if (mlp != "gelu" && mlp != "swiglu")
      fail("mlp must be 'gelu' or 'swiglu', found '" + mlp + "'");
    if (reg_tokens < 0 || reg_tokens > 64) {
      fail("reg_tokens must be in 0..64, found " + std::to_string(reg_tokens));
    }
    if (dist_token && (!class_token || pool != Pool::cls || reg_tokens != 0)) {
      fail("dist_token needs a class token and class-token pooling, and no registers (DeiT)");
    }
    if (!(layer_scale >= 0 && layer_scale <= 1e3)) {
      fail("layer_scale must be in [0, 1000] (0: none), found " + std::to_string(layer_scale));
    }
  } else {
    if (depths.empty() || depths.size() != stage_heads.size() || depths.size() > 8) {
      fail("depths and stage_heads need one entry per stage (1 to 8 stages), found " +
           std::to_string(depths.size()) + " and " + std::to_string(stage_heads.size()));
    }
    // A window larger than the patch grid is clamped to it, so a larger one is a mistake.
    in_range(window, std::max(img_rows, img_cols) / patch, "window");
    for (size_t s = 0; s < depths.size(); ++s) {
      in_range(depths[s], 1024, "depths[stage]");
      const int64_t d = dim << s;
      if (stage_heads[s] <= 0 || d % stage_heads[s]) {
        fail("stage " + std::to_string(s) + ": dim " + std::to_string(d) +
             " is not divisible by heads " + std::to_string(stage_heads[s]));
      }
    }
    if (class_token) fail("Swin has no class token");
    if (mlp != "gelu" || mlp_norm) fail("mlp and mlp_norm are ViT options (timm's Swin has GELU)");
    if (layer_scale != 0 || no_embed_class || reg_tokens != 0 || dist_token) {
      fail(
          "layer_scale, no_embed_class, reg_tokens and dist_token are ViT options (timm's Swin "
          "has none)");
    }
  }
}

std::string ModelConfig::to_json() const {
  nlohmann::json j;
  j["kind"] = kind == ModelKind::vit ? "vit" : "swin";
  j["name"] = name;
  j["img_size"] = {img_rows, img_cols};
  j["channels"] = channels;
  j["patch"] = patch;
  j["classes"] = classes;
  j["encoding"] = encoding;
  j["dim"] = dim;
  j["eps"] = eps;
  j["pool"] = pool == Pool::cls ? "cls" : "avg";
  if (kind == ModelKind::vit) {
    j["depth"] = depth;
    j["heads"] = heads;
    j["mlp_dim"] = mlp_dim;
    j["class_token"] = class_token;
    j["layer_scale"] = layer_scale;
    j["no_embed_class"] = no_embed_class;
    j["reg_tokens"] = reg_tokens;
    j["dist_token"] = dist_token;
    if (mlp != "gelu") j["mlp"] = mlp;  // absent for GELU, as in files written before SwiGLU
    if (mlp_norm) j["mlp_norm"] = true;
  } else {
    j["depths"] = depths;
    j["stage_heads"] = stage_heads;
    j["window"] = window;
    j["mlp_ratio"] = mlp_ratio;
    if (swin_v2) j["swin_v2"] = true;  // absent for V1, as in files written before V2
  }
  j["crop_pct"] = crop_pct;
  j["crop_mode"] = crop_mode;
  j["interpolation"] = interpolation;
  j["mean"] = mean;
  j["std"] = std_dev;
  j["labels"] = labels;
  return j.dump();
}

namespace {

// A JSON integer that fits int64 (a float such as 1e300 was once cast with undefined behaviour).
int64_t integer(const nlohmann::json& v, const std::string& field) {
  if (v.is_number_integer() &&
      !(v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return v.get<int64_t>();
  }
  throw std::invalid_argument("model config: " + field + " must be an integer, found " +
                              v.dump().substr(0, 40));
}

std::vector<int64_t> integers(const nlohmann::json& v, const std::string& field) {
  if (!v.is_array()) {
    throw std::invalid_argument("model config: " + field + " must be a list of integers, found " +
                                v.dump().substr(0, 40));
  }
  std::vector<int64_t> out;
  for (const auto& x : v) out.push_back(integer(x, field));
  return out;
}

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("model config: invalid JSON: ") + e.what());
  }
  ModelConfig c;
  try {
    std::string kind = j.at("kind");
    if (kind != "vit" && kind != "swin") {
      throw std::invalid_argument("model config: kind must be 'vit' or 'swin', found '" + kind +
                                  "'");
    }
    c.kind = kind == "vit" ? ModelKind::vit : ModelKind::swin;
    c.name = j.value("name", "custom");
    c.img_rows = integer(j.at("img_size").at(0), "img_size");
    c.img_cols = integer(j.at("img_size").at(1), "img_size");
    c.channels = integer(j.at("channels"), "channels");
    c.patch = integer(j.at("patch"), "patch");
    c.classes = integer(j.at("classes"), "classes");
    c.encoding = j.at("encoding");
    c.dim = integer(j.at("dim"), "dim");
    c.eps = j.at("eps");
    const std::string pool = j.at("pool");
    if (pool != "cls" && pool != "avg") {
      throw std::invalid_argument("model config: pool must be 'cls' or 'avg', found '" + pool +
                                  "'");
    }
    c.pool = pool == "cls" ? Pool::cls : Pool::avg;
    if (c.kind == ModelKind::vit) {
      c.depth = integer(j.at("depth"), "depth");
      c.heads = integer(j.at("heads"), "heads");
      c.mlp_dim = integer(j.at("mlp_dim"), "mlp_dim");
      c.class_token = j.value("class_token", true);
      // Files written before DeiT-III support have neither: plain ViT.
      c.layer_scale = j.value("layer_scale", 0.0);
      c.no_embed_class = j.value("no_embed_class", false);
      c.reg_tokens = j.contains("reg_tokens") ? integer(j.at("reg_tokens"), "reg_tokens") : 0;
      c.dist_token = j.value("dist_token", false);
      c.mlp = j.value("mlp", "gelu");
      c.mlp_norm = j.value("mlp_norm", false);
    } else {
      c.depths = integers(j.at("depths"), "depths");
      c.stage_heads = integers(j.at("stage_heads"), "stage_heads");
      c.window = integer(j.at("window"), "window");
      c.mlp_ratio = j.value("mlp_ratio", 4.0f);
      c.swin_v2 = j.value("swin_v2", false);
      if (!(c.mlp_ratio > 0 && c.mlp_ratio <= 64)) {
        throw std::invalid_argument("model config: mlp_ratio must be in (0, 64], found " +
                                    std::to_string(c.mlp_ratio));
      }
      c.class_token = false;
      c.depth = 0;
      c.heads = c.stage_heads.empty() ? 0 : c.stage_heads[0];
      c.mlp_dim = static_cast<int64_t>(c.dim * c.mlp_ratio);
    }
    // Older files have no crop_mode or interpolation: timm's defaults.
    c.crop_pct = j.value("crop_pct", 0.875);
    c.crop_mode = j.value("crop_mode", "center");
    c.interpolation = j.value("interpolation", "bicubic");
    c.mean = j.at("mean").get<std::vector<float>>();
    c.std_dev = j.at("std").get<std::vector<float>>();
    c.labels = j.value("labels", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("model config: missing or mistyped field: ") +
                                e.what());
  }
  c.validate();
  return c;
}

}  // namespace vitpe
