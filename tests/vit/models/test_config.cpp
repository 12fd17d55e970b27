// The model config: every preset of every family validates, travels through JSON unchanged and
// keeps the family label it had before presets stored theirs; the common part's checks.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/testing.h"
#include "vit/models/family.h"

namespace vitpe {
namespace {

// Each preset's label as `model_family()` derived it from the config before presets stored
// their labels (recorded from vitpe 0.1.0 at e7a6ff5; timm's names for what each builds).
// clang-format off
const std::map<std::string, std::string> kLabels = {
    {"vit_tiny_patch16_224", "ViT"},
    {"vit_small_patch16_224", "ViT"},
    {"vit_base_patch16_224", "ViT"},
    {"vit_tiny_patch16_384", "ViT"},
    {"vit_small_patch16_384", "ViT"},
    {"vit_small_patch32_224", "ViT"},
    {"vit_small_patch32_384", "ViT"},
    {"vit_base_patch16_384", "ViT"},
    {"vit_base_patch32_224", "ViT"},
    {"vit_base_patch32_384", "ViT"},
    {"vit_large_patch16_224", "ViT"},
    {"vit_large_patch16_384", "ViT"},
    {"vit_large_patch32_384", "ViT"},
    {"deit_tiny_patch16_224", "ViT"},
    {"deit_small_patch16_224", "ViT"},
    {"deit_base_patch16_224", "ViT"},
    {"deit_base_patch16_384", "ViT"},
    {"deit_tiny_distilled_patch16_224", "DeiT distilled"},
    {"deit_small_distilled_patch16_224", "DeiT distilled"},
    {"deit_base_distilled_patch16_224", "DeiT distilled"},
    {"deit_base_distilled_patch16_384", "DeiT distilled"},
    {"beit_base_patch16_224", "BEiT"},
    {"beit_base_patch16_384", "BEiT"},
    {"beit_large_patch16_224", "BEiT"},
    {"deit3_small_patch16_224", "DeiT-III"},
    {"deit3_small_patch16_384", "DeiT-III"},
    {"deit3_medium_patch16_224", "DeiT-III"},
    {"deit3_base_patch16_224", "DeiT-III"},
    {"deit3_base_patch16_384", "DeiT-III"},
    {"deit3_large_patch16_224", "DeiT-III"},
    {"deit3_large_patch16_384", "DeiT-III"},
    {"deit3_huge_patch14_224", "DeiT-III"},
    {"vit_medium_patch16_reg4_gap_256", "ViT with layer scale, pos_embed without prefix rows + 4 register tokens"},
    {"vit_betwixt_patch16_reg4_gap_256", "ViT with layer scale, pos_embed without prefix rows + 4 register tokens"},
    {"vit_base_patch16_reg4_gap_256", "ViT, pos_embed without prefix rows + 4 register tokens"},
    {"vit_small_patch16_rope_224", "RoPE-ViT (Eva) axial"},
    {"vit_small_patch16_rope_mixed_224", "RoPE-ViT (Eva) mixed"},
    {"vit_small_patch16_rope_ape_224", "RoPE-ViT (Eva) axial + APE"},
    {"vit_small_patch16_rope_mixed_ape_224", "RoPE-ViT (Eva) mixed + APE"},
    {"vit_base_patch16_rope_224", "RoPE-ViT (Eva) axial"},
    {"vit_base_patch16_rope_mixed_224", "RoPE-ViT (Eva) mixed"},
    {"vit_base_patch16_rope_ape_224", "RoPE-ViT (Eva) axial + APE"},
    {"vit_base_patch16_rope_mixed_ape_224", "RoPE-ViT (Eva) mixed + APE"},
    {"vit_large_patch16_rope_224", "RoPE-ViT (Eva) axial"},
    {"vit_large_patch16_rope_mixed_224", "RoPE-ViT (Eva) mixed"},
    {"vit_large_patch16_rope_ape_224", "RoPE-ViT (Eva) axial + APE"},
    {"vit_large_patch16_rope_mixed_ape_224", "RoPE-ViT (Eva) mixed + APE"},
    {"vit_medium_patch16_rope_reg1_gap_256", "RoPE-ViT (Eva) axial + 1 register tokens"},
    {"vit_mediumd_patch16_rope_reg1_gap_256", "RoPE-ViT (Eva) axial + 1 register tokens"},
    {"vit_betwixt_patch16_rope_reg4_gap_256", "RoPE-ViT (Eva) axial + 4 register tokens"},
    {"vit_base_patch16_rope_reg1_gap_256", "RoPE-ViT (Eva) axial + 1 register tokens"},
    {"eva02_tiny_patch14_336", "EVA-02"},
    {"eva02_small_patch14_336", "EVA-02"},
    {"eva02_base_patch14_448", "EVA-02 (SwiGLU with norm)"},
    {"eva02_large_patch14_448", "EVA-02 (SwiGLU with norm)"},
    {"swin_tiny_patch4_window7_224", "Swin"},
    {"swin_small_patch4_window7_224", "Swin"},
    {"swin_base_patch4_window7_224", "Swin"},
    {"swin_base_patch4_window12_384", "Swin"},
    {"swin_large_patch4_window7_224", "Swin"},
    {"swin_large_patch4_window12_384", "Swin"},
    {"swinv2_tiny_window8_256", "Swin V2"},
    {"swinv2_tiny_window16_256", "Swin V2"},
    {"swinv2_small_window8_256", "Swin V2"},
    {"swinv2_small_window16_256", "Swin V2"},
    {"swinv2_base_window8_256", "Swin V2"},
    {"swinv2_base_window16_256", "Swin V2"},
    {"vit-fmnist", "ViT"},
    // The image-encoder families (labels their presets were given when they were added).
    {"vit_small_patch14_dinov2", "DINOv2"},
    {"vit_base_patch14_dinov2", "DINOv2"},
    {"vit_large_patch14_dinov2", "DINOv2"},
    {"vit_giant_patch14_dinov2", "DINOv2 (SwiGLU)"},
    {"vit_small_patch14_reg4_dinov2", "DINOv2 + 4 register tokens"},
    {"vit_base_patch14_reg4_dinov2", "DINOv2 + 4 register tokens"},
    {"vit_large_patch14_reg4_dinov2", "DINOv2 + 4 register tokens"},
    {"vit_giant_patch14_reg4_dinov2", "DINOv2 (SwiGLU) + 4 register tokens"},
    {"vit_base_patch32_clip_224", "CLIP image tower"},
    {"vit_base_patch16_clip_224", "CLIP image tower"},
    {"vit_large_patch14_clip_224", "CLIP image tower"},
    {"vit_base_patch32_clip_quickgelu_224", "CLIP image tower (quick_gelu)"},
    {"vit_base_patch16_clip_quickgelu_224", "CLIP image tower (quick_gelu)"},
    {"vit_large_patch14_clip_quickgelu_224", "CLIP image tower (quick_gelu)"},
    {"vit_base_patch16_siglip_224", "SigLIP image tower"},
    {"vit_base_patch16_siglip_256", "SigLIP image tower"},
    {"vit_base_patch16_siglip_384", "SigLIP image tower"},
    {"vit_base_patch16_siglip_512", "SigLIP image tower"},
    {"vit_base_patch16_siglip_gap_224", "SigLIP image tower (mean pooling)"},
    {"vit_base_patch16_siglip_gap_256", "SigLIP image tower (mean pooling)"},
    {"vit_base_patch16_siglip_gap_384", "SigLIP image tower (mean pooling)"},
    {"vit_base_patch16_siglip_gap_512", "SigLIP image tower (mean pooling)"},
    {"vit_small_patch16_dinov3", "DINOv3"},
    {"vit_small_patch16_dinov3_qkvb", "DINOv3 (qkv bias)"},
    {"vit_base_patch16_dinov3", "DINOv3"},
    {"vit_base_patch16_dinov3_qkvb", "DINOv3 (qkv bias)"},
    {"vit_large_patch16_dinov3", "DINOv3"},
    {"vit_large_patch16_dinov3_qkvb", "DINOv3 (qkv bias)"},
    {"swin-fmnist", "Swin"},
};
// clang-format on

TEST(Presets, EveryPresetValidatesRoundTripsAndKeepsItsLabel) {
  const std::vector<std::string> names = preset_names();
  EXPECT_EQ(names.size(), kLabels.size()) << "a preset was added or removed: record its label";
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset(name);
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(c.name, name);
    EXPECT_EQ(family_of(c).name, c.family);
    // The label is stored, and it is what the family would describe the config as.
    ASSERT_TRUE(kLabels.count(name));
    EXPECT_EQ(c.label, kLabels.at(name));
    EXPECT_EQ(family_of(c).describe(c), c.label);
    const ModelConfig back = ModelConfig::from_json(c.to_json());
    EXPECT_EQ(back, c);
    EXPECT_EQ(back.to_json(), c.to_json());
  }
}

// The family is not guessed from the encoding's text: a conditional part beside the rotation is
// not RoPE-ViT's absolute table ("+ APE"), a token part is.
TEST(Presets, LabelsReadTheEncodingsParts) {
  ModelConfig c = preset("vit_small_patch16_rope_mixed_224");
  c.label.clear();
  EXPECT_EQ(c.family_label(), "RoPE-ViT (Eva) mixed");
  c.encoding = "peg+rope-mixed";
  EXPECT_EQ(c.family_label(), "RoPE-ViT (Eva) mixed");
  c.encoding = "learned1d+rope-mixed";
  EXPECT_EQ(c.family_label(), "RoPE-ViT (Eva) mixed + APE");
  c.encoding = "sincos2d+rope-axial";
  EXPECT_EQ(c.family_label(), "RoPE-ViT (Eva) axial + APE");
}

TEST(ModelConfig, OlderFilesReadWithTheirDefaults) {
  // A ViT config as the first files wrote it (no variant fields, no preprocessing mode, no
  // label), and a Swin config with the "pool" files wrote for Swin before the families.
  const ModelConfig vit = ModelConfig::from_json(
      R"({"kind":"vit","name":"vit-fmnist","img_size":[28,28],"channels":1,"patch":4,)"
      R"("classes":10,"encoding":"sincos2d","dim":128,"eps":1e-6,"pool":"avg","depth":6,)"
      R"("heads":4,"mlp_dim":512,"class_token":false,"crop_pct":1.0,"mean":[0.286],)"
      R"("std":[0.353],"labels":[]})");
  EXPECT_EQ(vit.family, "vit");
  EXPECT_EQ(vit.vit().layer_scale, 0);
  EXPECT_EQ(vit.vit().mlp, Mlp::gelu);
  EXPECT_EQ(vit.preprocess.crop_mode, CropMode::center);
  EXPECT_EQ(vit.family_label(), "ViT");
  const ModelConfig swin = ModelConfig::from_json(
      R"({"kind":"swin","name":"swin-fmnist","img_size":[28,28],"channels":1,"patch":2,)"
      R"("classes":10,"encoding":"relbias","dim":64,"eps":1e-5,"pool":"avg","depths":[2,2],)"
      R"("stage_heads":[2,4],"window":7,"mlp_ratio":4.0,"crop_pct":1.0,"mean":[0.286],)"
      R"("std":[0.353],"labels":[]})");
  EXPECT_EQ(swin.family, "swin");
  EXPECT_FALSE(swin.swin().v2);
  EXPECT_EQ(swin.swin().depths, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(swin.family_label(), "Swin");
}

TEST(ModelConfig, UnknownFamilyAndWrongArchitectureAreErrors) {
  std::string m =
      testing::message_of([] { ModelConfig::from_json(R"({"kind":"resnet","img_size":[8,8]})"); });
  EXPECT_NE(
      m.find("unknown model family 'resnet' (known: vit, swin, dinov2, clip, siglip, dinov3)"),
      std::string::npos)
      << m;
  ModelConfig c = preset("vit-fmnist");
  c.family = "swin";  // a Swin family over a ViT architecture
  m = testing::message_of([&] { c.validate(); });
  EXPECT_NE(m.find("family 'swin' has another architecture"), std::string::npos) << m;
  m = testing::message_of([&] { (void)preset("swin-fmnist").vit(); });
  EXPECT_NE(m.find("the ViT architecture asked of a config of family 'swin'"), std::string::npos)
      << m;
}

// One range for each preprocessing field whatever its source; numbers print as numbers.
TEST(ModelConfig, PreprocessingRangesHoldForFileFields) {
  ModelConfig c = preset("vit-fmnist");
  for (double crop : {1e-10, 0.0, -1.0, 4.5, 1e300}) {
    c.preprocess.crop_pct = crop;
    const std::string m = testing::message_of([&] { c.validate(); });
    EXPECT_NE(m.find("crop_pct must be in [0.01, 4]"), std::string::npos) << m;
    EXPECT_LT(m.size(), 200u) << m;  // 1e300 is not printed with 300 digits
  }
  c.preprocess.crop_pct = 0.01;
  EXPECT_NO_THROW(c.validate());
  c.preprocess.std_dev = {0};
  EXPECT_NE(testing::message_of([&] { c.validate(); }).find("std in [1e-06, 1000]"),
            std::string::npos);
  nlohmann::json j = nlohmann::json::parse(preset("vit-fmnist").to_json());
  j["crop_pct"] = 1e-10;
  const std::string m = testing::message_of([&] { ModelConfig::from_json(j.dump()); });
  EXPECT_NE(m.find("crop_pct must be in [0.01, 4], found 1e-10"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
