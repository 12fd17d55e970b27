// The ViT family's presets: timm's model names with the preprocessing of timm's default weights
// for each (`timm.create_model(name).pretrained_cfg`), an alias in vitpe's earlier spelling, the
// family label of what each builds, and our Fashion-MNIST model.
#include "vit/models/vit/vit_family.h"

namespace vitpe::vit_family {

namespace {

ModelConfig vit(int64_t dim, int64_t depth, int64_t heads) { return vit_of(dim, depth, heads); }

}  // namespace

ModelConfig vit_of(int64_t dim, int64_t depth, int64_t heads) {
  ModelConfig c = blank();
  VitArch& a = c.vit();
  a.dim = dim;
  a.depth = depth;
  a.heads = heads;
  a.mlp_dim = 4 * dim;
  return c;
}

// OpenAI CLIP's statistics (EVA-02's, betwixt's and the CLIP towers' weights).
void clip_statistics(ModelConfig& c) {
  c.preprocess.mean = {0.48145466f, 0.4578275f, 0.40821073f};
  c.preprocess.std_dev = {0.26862954f, 0.26130258f, 0.27577711f};
}

namespace {

ModelConfig vit_fmnist() {
  ModelConfig c = fashion_mnist_input(vit(128, 6, 4));
  c.patch = 4;
  VitArch& a = c.vit();
  a.mlp_dim = 512;
  // Global average pooling, no class token (Beyer et al., "Better plain ViT baselines", the
  // recipe sincos2d comes from): on Fashion-MNIST it is ahead of the class token at every
  // epoch of the same 15-epoch run, 90.66 % against 89.57 % at the end (docs/results).
  a.pool = Pool::avg;
  a.class_token = false;
  return c;
}

// timm's preprocessing for its ViT presets' default weights (the augreg tags): mean = std = 0.5,
// crop 0.9, bicubic.
ModelConfig timm_vit(int64_t dim, int64_t depth, int64_t heads) {
  ModelConfig c = vit(dim, depth, heads);
  c.labels = imagenet_labels();
  c.preprocess.mean = c.preprocess.std_dev = {0.5f, 0.5f, 0.5f};
  c.preprocess.crop_pct = 0.9;
  return c;
}

// timm's DeiT (Touvron et al. 2021; deit_*): plain ViT, or with the distillation token and
// head_dist; its fb_in1k weights use ImageNet statistics, bicubic, crop 0.9 at 224, 1.0 at 384.
ModelConfig timm_deit(int64_t dim, int64_t heads, int64_t size, bool distilled) {
  ModelConfig c = vit(dim, 12, heads);
  c.img_rows = c.img_cols = size;
  c.vit().dist_token = distilled;
  c.labels = imagenet_labels();
  c.preprocess.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's BEiT (Bao et al. 2022; beit_*): no position table, a relative position bias in every
// block with BEiT's three class-token entries (our relbias with a prefix, resized at other sizes
// with timm's geometric scheme), layer scale 0.1, mean pooling with fc_norm; its weights use
// mean = std = 0.5, bicubic, crop 0.9 at 224, 1.0 at 384.
ModelConfig timm_beit(int64_t dim, int64_t depth, int64_t heads, int64_t size) {
  ModelConfig c = timm_vit(dim, depth, heads);
  c.img_rows = c.img_cols = size;
  c.encoding = "relbias:resize=beit";  // at other sizes the tables resize as timm's BEiT
  c.vit().pool = Pool::avg;
  c.vit().layer_scale = 0.1;
  c.preprocess.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's DeiT-III (Touvron et al. 2022; deit3_*): ViT with layer scale (init 1e-6) and a
// position table without a class row; its fb_in1k weights use ImageNet statistics, bicubic, crop
// 0.9 at 224 and 1.0 at 384.
ModelConfig timm_deit3(int64_t dim, int64_t depth, int64_t heads, int64_t patch, int64_t size) {
  ModelConfig c = vit(dim, depth, heads);
  c.patch = patch;
  c.img_rows = c.img_cols = size;
  c.vit().layer_scale = 1e-6;
  c.vit().no_embed_class = true;
  c.labels = imagenet_labels();
  c.preprocess.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

// timm's vit_*_patch16_reg4_gap_256 (the "sbb" recipes): no class token, 4 register tokens
// without position rows, mean pooling with fc_norm; medium and betwixt with layer scale 1e-5 and
// crop 0.95 (their sbb weights), base without (untrained in timm: its defaults, crop 0.9).
ModelConfig timm_reg4_gap(int64_t dim, int64_t heads, double layer_scale, double crop) {
  ModelConfig c = timm_vit(dim, 12, heads);
  c.img_rows = c.img_cols = 256;
  VitArch& a = c.vit();
  a.class_token = false;
  a.pool = Pool::avg;
  a.reg_tokens = 4;
  a.no_embed_class = true;
  a.layer_scale = layer_scale;
  c.preprocess.crop_pct = crop;
  return c;
}

// timm's RoPE-ViT (Heo et al. 2024; vit_*_patch16_rope[_mixed][_ape]_224, timm's Eva class): a
// class token and class-token pooling, layer scale 1e-5, rotary embedding in every block: axial
// with theta 100 (timm's rope_temperature; 'xy' indexing) or mixed (learned frequencies, theta
// 10 for their init); the _ape variants add a learned position table without a class row. Its
// weights use ImageNet statistics, bicubic, crop 0.9.
ModelConfig timm_rope_vit(int64_t dim, int64_t depth, int64_t heads, bool mixed, bool ape) {
  ModelConfig c = vit(dim, depth, heads);
  c.vit().layer_scale = 1e-5;
  c.encoding = std::string(ape ? "learned1d+" : "") + (mixed ? "rope-mixed" : "rope-axial");
  c.vit().no_embed_class = ape;
  c.labels = imagenet_labels();
  c.preprocess.crop_pct = 0.9;
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
  VitArch& a = c.vit();
  a.class_token = false;
  a.pool = Pool::avg;
  a.reg_tokens = reg;
  a.layer_scale = 1e-5;
  c.encoding = "rope-axial:theta=10000,indexing=ij,ref=16x16";
  c.preprocess.crop_pct = 0.95;
  if (dim == 640) clip_statistics(c);
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
  VitArch& a = c.vit();
  a.pool = Pool::avg;
  a.mlp = Mlp::swiglu;
  a.mlp_dim = dim * 8 / 3;
  a.mlp_norm = dim >= 768;
  c.encoding = "learned1d+rope-axial:theta=10000,indexing=ij,ref=16x16";
  c.labels = imagenet_labels();
  clip_statistics(c);
  c.preprocess.crop_pct = 1.0;
  c.preprocess.crop_mode = size == 448 ? CropMode::squash : CropMode::center;
  return c;
}

// timm's ViT at another patch or size: the augreg weights' preprocessing, crop 1.0 at 384.
ModelConfig timm_vit_at(int64_t dim, int64_t depth, int64_t heads, int64_t patch, int64_t size) {
  ModelConfig c = timm_vit(dim, depth, heads);
  c.patch = patch;
  c.img_rows = c.img_cols = size;
  c.preprocess.crop_pct = size == 224 ? 0.9 : 1.0;
  return c;
}

}  // namespace

std::vector<PresetDef> presets() {
  // clang-format off
  return {
    {"vit_tiny_patch16_224", "vit-tiny-patch16-224", "ViT",
     [] { return timm_vit(192, 12, 3); }},
    {"vit_small_patch16_224", "vit-small-patch16-224", "ViT",
     [] { return timm_vit(384, 12, 6); }},
    {"vit_base_patch16_224", "vit-base-patch16-224", "ViT",
     [] { return timm_vit(768, 12, 12); }},
    {"vit_tiny_patch16_384", "", "ViT",
     [] { return timm_vit_at(192, 12, 3, 16, 384); }},
    {"vit_small_patch16_384", "", "ViT",
     [] { return timm_vit_at(384, 12, 6, 16, 384); }},
    {"vit_small_patch32_224", "", "ViT",
     [] { return timm_vit_at(384, 12, 6, 32, 224); }},
    {"vit_small_patch32_384", "", "ViT",
     [] { return timm_vit_at(384, 12, 6, 32, 384); }},
    {"vit_base_patch16_384", "", "ViT",
     [] { return timm_vit_at(768, 12, 12, 16, 384); }},
    {"vit_base_patch32_224", "", "ViT",
     [] { return timm_vit_at(768, 12, 12, 32, 224); }},
    {"vit_base_patch32_384", "", "ViT",
     [] { return timm_vit_at(768, 12, 12, 32, 384); }},
    {"vit_large_patch16_224", "", "ViT",
     [] { return timm_vit_at(1024, 24, 16, 16, 224); }},
    {"vit_large_patch16_384", "", "ViT",
     [] { return timm_vit_at(1024, 24, 16, 16, 384); }},
    {"vit_large_patch32_384", "", "ViT",
     [] { return timm_vit_at(1024, 24, 16, 32, 384); }},
    {"deit_tiny_patch16_224", "", "ViT",
     [] { return timm_deit(192, 3, 224, false); }},
    {"deit_small_patch16_224", "", "ViT",
     [] { return timm_deit(384, 6, 224, false); }},
    {"deit_base_patch16_224", "", "ViT",
     [] { return timm_deit(768, 12, 224, false); }},
    {"deit_base_patch16_384", "", "ViT",
     [] { return timm_deit(768, 12, 384, false); }},
    {"deit_tiny_distilled_patch16_224", "", "DeiT distilled",
     [] { return timm_deit(192, 3, 224, true); }},
    {"deit_small_distilled_patch16_224", "", "DeiT distilled",
     [] { return timm_deit(384, 6, 224, true); }},
    {"deit_base_distilled_patch16_224", "", "DeiT distilled",
     [] { return timm_deit(768, 12, 224, true); }},
    {"deit_base_distilled_patch16_384", "", "DeiT distilled",
     [] { return timm_deit(768, 12, 384, true); }},
    {"beit_base_patch16_224", "", "BEiT",
     [] { return timm_beit(768, 12, 12, 224); }},
    {"beit_base_patch16_384", "", "BEiT",
     [] { return timm_beit(768, 12, 12, 384); }},
    {"beit_large_patch16_224", "", "BEiT",
     [] { return timm_beit(1024, 24, 16, 224); }},
    {"deit3_small_patch16_224", "", "DeiT-III",
     [] { return timm_deit3(384, 12, 6, 16, 224); }},
    {"deit3_small_patch16_384", "", "DeiT-III",
     [] { return timm_deit3(384, 12, 6, 16, 384); }},
    {"deit3_medium_patch16_224", "", "DeiT-III",
     [] { return timm_deit3(512, 12, 8, 16, 224); }},
    {"deit3_base_patch16_224", "", "DeiT-III",
     [] { return timm_deit3(768, 12, 12, 16, 224); }},
    {"deit3_base_patch16_384", "", "DeiT-III",
     [] { return timm_deit3(768, 12, 12, 16, 384); }},
    {"deit3_large_patch16_224", "", "DeiT-III",
     [] { return timm_deit3(1024, 24, 16, 16, 224); }},
    {"deit3_large_patch16_384", "", "DeiT-III",
     [] { return timm_deit3(1024, 24, 16, 16, 384); }},
    {"deit3_huge_patch14_224", "", "DeiT-III",
     [] { return timm_deit3(1280, 32, 16, 14, 224); }},
    {"vit_medium_patch16_reg4_gap_256", "", "ViT with layer scale, pos_embed without prefix rows + 4 register tokens",
     [] { return timm_reg4_gap(512, 8, 1e-5, 0.95); }},
    {"vit_betwixt_patch16_reg4_gap_256", "", "ViT with layer scale, pos_embed without prefix rows + 4 register tokens",
     [] { return timm_reg4_gap(640, 10, 1e-5, 0.95); }},
    {"vit_base_patch16_reg4_gap_256", "", "ViT, pos_embed without prefix rows + 4 register tokens",
     [] { return timm_reg4_gap(768, 12, 0, 0.9); }},
    {"vit_small_patch16_rope_224", "", "RoPE-ViT (Eva) axial",
     [] { return timm_rope_vit(384, 12, 6, false, false); }},
    {"vit_small_patch16_rope_mixed_224", "", "RoPE-ViT (Eva) mixed",
     [] { return timm_rope_vit(384, 12, 6, true, false); }},
    {"vit_small_patch16_rope_ape_224", "", "RoPE-ViT (Eva) axial + APE",
     [] { return timm_rope_vit(384, 12, 6, false, true); }},
    {"vit_small_patch16_rope_mixed_ape_224", "", "RoPE-ViT (Eva) mixed + APE",
     [] { return timm_rope_vit(384, 12, 6, true, true); }},
    {"vit_base_patch16_rope_224", "", "RoPE-ViT (Eva) axial",
     [] { return timm_rope_vit(768, 12, 12, false, false); }},
    {"vit_base_patch16_rope_mixed_224", "", "RoPE-ViT (Eva) mixed",
     [] { return timm_rope_vit(768, 12, 12, true, false); }},
    {"vit_base_patch16_rope_ape_224", "", "RoPE-ViT (Eva) axial + APE",
     [] { return timm_rope_vit(768, 12, 12, false, true); }},
    {"vit_base_patch16_rope_mixed_ape_224", "", "RoPE-ViT (Eva) mixed + APE",
     [] { return timm_rope_vit(768, 12, 12, true, true); }},
    {"vit_large_patch16_rope_224", "", "RoPE-ViT (Eva) axial",
     [] { return timm_rope_vit(1024, 24, 16, false, false); }},
    {"vit_large_patch16_rope_mixed_224", "", "RoPE-ViT (Eva) mixed",
     [] { return timm_rope_vit(1024, 24, 16, true, false); }},
    {"vit_large_patch16_rope_ape_224", "", "RoPE-ViT (Eva) axial + APE",
     [] { return timm_rope_vit(1024, 24, 16, false, true); }},
    {"vit_large_patch16_rope_mixed_ape_224", "", "RoPE-ViT (Eva) mixed + APE",
     [] { return timm_rope_vit(1024, 24, 16, true, true); }},
    {"vit_medium_patch16_rope_reg1_gap_256", "", "RoPE-ViT (Eva) axial + 1 register tokens",
     [] { return timm_rope_reg_gap(512, 12, 8, 1); }},
    {"vit_mediumd_patch16_rope_reg1_gap_256", "", "RoPE-ViT (Eva) axial + 1 register tokens",
     [] { return timm_rope_reg_gap(512, 20, 8, 1); }},
    {"vit_betwixt_patch16_rope_reg4_gap_256", "", "RoPE-ViT (Eva) axial + 4 register tokens",
     [] { return timm_rope_reg_gap(640, 12, 10, 4); }},
    {"vit_base_patch16_rope_reg1_gap_256", "", "RoPE-ViT (Eva) axial + 1 register tokens",
     [] { return timm_rope_reg_gap(768, 12, 12, 1); }},
    {"eva02_tiny_patch14_336", "", "EVA-02",
     [] { return timm_eva02(192, 12, 3, 336); }},
    {"eva02_small_patch14_336", "", "EVA-02",
     [] { return timm_eva02(384, 12, 6, 336); }},
    {"eva02_base_patch14_448", "", "EVA-02 (SwiGLU with norm)",
     [] { return timm_eva02(768, 12, 12, 448); }},
    {"eva02_large_patch14_448", "", "EVA-02 (SwiGLU with norm)",
     [] { return timm_eva02(1024, 24, 16, 448); }},
    {"vit-fmnist", "", "ViT",
     vit_fmnist},
  };
  // clang-format on
}

}  // namespace vitpe::vit_family
