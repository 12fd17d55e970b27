// The Swin family's presets: timm's model names with the preprocessing of timm's default weights
// for each, an alias in vitpe's earlier spelling, the family label, and our Fashion-MNIST model.
#include "vit/models/swin/swin_family.h"

namespace vitpe::swin_family {

namespace {

ModelConfig swin(int64_t patch, int64_t dim, std::vector<int64_t> depths,
                 std::vector<int64_t> heads) {
  ModelConfig c = blank();
  c.patch = patch;
  SwinArch& a = c.swin();
  a.dim = dim;
  a.depths = std::move(depths);
  a.stage_heads = std::move(heads);
  return c;
}

// timm's Swin default weights (ms_in1k / ms_in22k_ft_in1k): ImageNet statistics, bicubic, crop
// 0.9 at 224 (window 7), 1.0 at 384 (window 12).
ModelConfig timm_swin(int64_t dim, std::vector<int64_t> depths, std::vector<int64_t> heads,
                      int64_t window, int64_t size) {
  ModelConfig c = swin(4, dim, std::move(depths), std::move(heads));
  c.swin().window = window;
  c.img_rows = c.img_cols = size;
  c.preprocess.crop_pct = size == 224 ? 0.9 : 1.0;
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
  c.swin().v2 = true;
  c.encoding = "cpb";
  c.preprocess.crop_pct = 0.9;
  return c;
}

}  // namespace

std::vector<PresetDef> presets() {
  // clang-format off
  return {
    {"swin_tiny_patch4_window7_224", "swin-tiny-patch4-window7-224", "Swin",
     [] { return timm_swin(96, {2, 2, 6, 2}, {3, 6, 12, 24}, 7, 224); }},
    {"swin_small_patch4_window7_224", "", "Swin",
     [] { return timm_swin(96, {2, 2, 18, 2}, {3, 6, 12, 24}, 7, 224); }},
    {"swin_base_patch4_window7_224", "", "Swin",
     [] { return timm_swin(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 7, 224); }},
    {"swin_base_patch4_window12_384", "", "Swin",
     [] { return timm_swin(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 12, 384); }},
    {"swin_large_patch4_window7_224", "", "Swin",
     [] { return timm_swin(192, {2, 2, 18, 2}, {6, 12, 24, 48}, 7, 224); }},
    {"swin_large_patch4_window12_384", "", "Swin",
     [] { return timm_swin(192, {2, 2, 18, 2}, {6, 12, 24, 48}, 12, 384); }},
    {"swinv2_tiny_window8_256", "", "Swin V2",
     [] { return timm_swinv2(96, {2, 2, 6, 2}, {3, 6, 12, 24}, 8); }},
    {"swinv2_tiny_window16_256", "", "Swin V2",
     [] { return timm_swinv2(96, {2, 2, 6, 2}, {3, 6, 12, 24}, 16); }},
    {"swinv2_small_window8_256", "", "Swin V2",
     [] { return timm_swinv2(96, {2, 2, 18, 2}, {3, 6, 12, 24}, 8); }},
    {"swinv2_small_window16_256", "", "Swin V2",
     [] { return timm_swinv2(96, {2, 2, 18, 2}, {3, 6, 12, 24}, 16); }},
    {"swinv2_base_window8_256", "", "Swin V2",
     [] { return timm_swinv2(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 8); }},
    {"swinv2_base_window16_256", "", "Swin V2",
     [] { return timm_swinv2(128, {2, 2, 18, 2}, {4, 8, 16, 32}, 16); }},
    {"swin-fmnist", "", "Swin",
     [] { return fashion_mnist_input(swin(2, 64, {2, 2}, {2, 4})); }},
  };
  // clang-format on
}

}  // namespace vitpe::swin_family
