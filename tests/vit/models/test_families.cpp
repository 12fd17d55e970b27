// The family registry: every family's presets are its own, its sites are where its model's
// attention encodings sit, its checkpoint layouts are told apart by their names.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/testing.h"
#include "vit/models/family.h"

namespace vitpe {
namespace {

TEST(Families, TheListAndItsErrors) {
  std::vector<std::string> names;
  for (const FamilyDef* f : families()) names.push_back(f->name);
  EXPECT_EQ(names, (std::vector<std::string>{"vit", "swin", "dinov2", "clip", "siglip", "dinov3"}));
  const std::string m = testing::message_of([] { family("resnet"); });
  EXPECT_NE(
      m.find("unknown model family 'resnet' (known: vit, swin, dinov2, clip, siglip, dinov3)"),
      std::string::npos)
      << m;
}

TEST(Families, PresetsBelongToTheirFamily) {
  std::set<std::string> seen;
  for (const FamilyDef* f : families()) {
    EXPECT_FALSE(f->presets.empty()) << f->name;
    for (const PresetDef& p : f->presets) {
      EXPECT_TRUE(seen.insert(p.name).second) << "preset listed twice: " << p.name;
      const ModelConfig c = preset(p.name);
      EXPECT_EQ(c.family, f->name) << p.name;
      EXPECT_EQ(f->blank().arch.index(), c.arch.index()) << p.name;
    }
  }
}

// The sites a family reports are where its model's attention parts are: one per block, named
// by the parameters the parts own, seeing the window the model gives them.
TEST(Families, AttentionSitesAreTheModelsBlocks) {
  for (const char* name : {"vit-fmnist", "swin-fmnist"}) {
    ModelConfig c = preset(name);
    c.encoding = "relbias";
    const FamilyDef& f = family_of(c);
    const std::vector<AttentionSite> sites = f.attention_sites(c);
    auto model = make_model(c, 0);
    const Model::EncodingParts parts = model->encoding_parts();
    ASSERT_EQ(sites.size(), parts.attention.size()) << name;
    std::set<std::string> params;
    for (Param* p : model->params()) params.insert(p->name);
    for (size_t i = 0; i < sites.size(); ++i) {
      const AttentionSite& s = sites[i];
      EXPECT_TRUE(params.count(s.params_prefix + "attn.relative_position_bias_table"))
          << name << " block " << i << ": " << s.params_prefix;
      const Param* table = parts.attention[i]->params().at(0);
      // relbias: a (2 Mh - 1)(2 Mw - 1) (+ 3 class entries) x heads table for the site's window.
      const Grid w = s.geom.window;
      const int64_t rows = (2 * w.rows - 1) * (2 * w.cols - 1) + (s.geom.prefix > 0 ? 3 : 0);
      EXPECT_EQ(table->value.shape(), (Shape{rows, s.heads})) << name << " block " << i;
      // Swin's stage S (named "layers.S.") works at dim * 2^S.
      const int64_t stage = c.is_vit() ? 0 : std::stoll(s.params_prefix.substr(7));
      EXPECT_EQ(s.heads * s.head_dim, c.embed_dim() << stage) << name << " block " << i;
    }
    EXPECT_TRUE(params.count(f.head_weight)) << name;
    EXPECT_EQ(f.token_prefix(c), c.is_vit() ? c.vit().prefix_tokens() : 0);
  }
}

TEST(Families, CheckpointLayoutsAreToldApartByTheirNames) {
  struct Case {
    std::vector<std::string> names;
    const char* want;
  };
  const Case cases[] = {
      {{"blocks.0.norm1.weight", "patch_embed.proj.weight", "head.weight"}, "timm ViT"},
      {{"encoder.layers.encoder_layer_0.ln_1.weight", "conv_proj.weight"}, "torchvision ViT"},
      {{"layers.0.blocks.0.norm1.weight", "head.fc.weight"}, "timm Swin (>= 0.9)"},
      {{"layers.0.blocks.0.norm1.weight", "layers.0.downsample.reduction.weight"},
       "timm Swin (< 0.9 / Microsoft)"},
      {{"layers.0.blocks.0.norm1.weight", "head.weight"}, "timm Swin (< 0.9 / Microsoft)"},
      {{"features.0.0.weight", "features.1.0.norm1.weight"}, "torchvision Swin"},
  };
  for (const Case& c : cases) {
    const DialectMatch m = recognise_checkpoint(c.names);
    EXPECT_EQ(m.dialect->name, c.want) << c.names[0];
    EXPECT_EQ(dialect(c.want).dialect, m.dialect);
  }
  const std::string m = testing::message_of([] { recognise_checkpoint({"conv1.weight"}); });
  EXPECT_NE(m.find("unrecognised checkpoint"), std::string::npos) << m;
  EXPECT_NE(m.find("torchvision Swin"), std::string::npos) << m;  // the layouts it knows
  EXPECT_NE(testing::message_of([] { dialect("onnx"); }).find("unknown checkpoint layout 'onnx'"),
            std::string::npos);
}

TEST(Families, WhatTheGpuPathCannotRunIsTheFamilysToSay) {
  ModelConfig c = preset("swinv2_tiny_window8_256");
  EXPECT_NE(family_of(c).gpu_unsupported(c).find("Swin V2"), std::string::npos);
  c = preset("eva02_small_patch14_336");
  EXPECT_NE(family_of(c).gpu_unsupported(c).find("'swiglu' MLP"), std::string::npos);
  c = preset("vit_small_patch16_224");
  EXPECT_EQ(family_of(c).gpu_unsupported(c), "");
}

}  // namespace
}  // namespace vitpe
