// Parity with PyTorch: timm and torchvision ViT and Swin goldens (tests/golden/make_goldens.py)
// loaded through every naming scheme, at the trained size and at other sizes; name mapping;
// strict loading errors; our own format's round trip.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "tests/golden/synthetic_weights.h"
#include "tests/testing.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"
#include "vit/models/family.h"

namespace vitpe {
namespace {

std::string data(const std::string& name) { return std::string(VITPE_TEST_DATA) + "/" + name; }

// Runs `input_key` of the io file through the model and compares with `logits_key`.
void expect_checkpoint_logits(Model& model, const std::string& io_file,
                              const std::string& input_key, const std::string& logits_key,
                              double tol = 1e-4) {
  SafeTensorsFile io = SafeTensorsFile::open(data(io_file));
  Tensor x = io.get(input_key);
  Tensor want = io.get(logits_key);
  const Tensor& got = model.forward(x);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_LT(testing::max_rel_error(got, want), tol) << io_file << " " << logits_key;
}

LoadOptions swin56() {
  LoadOptions o;
  o.img_rows = 56;
  return o;
}

LoadOptions vit_options(int64_t heads) {
  LoadOptions o;
  o.heads = heads;
  return o;
}

TEST(Parity, TimmVitClassToken) {
  LoadedModel m = load_model(data("vit_timm.safetensors"), vit_options(4));
  EXPECT_EQ(m.format, "timm ViT");
  EXPECT_EQ(m.model->config().img_rows, 32);
  EXPECT_EQ(m.model->config().encoding, "learned1d");
  expect_checkpoint_logits(*m.model, "vit_timm_io.safetensors", "input", "logits");
}

TEST(Parity, TimmVitNewResolutions) {
  LoadedModel m = load_model(data("vit_timm.safetensors"), vit_options(4));
  expect_checkpoint_logits(*m.model, "vit_timm_io.safetensors", "input_48x48", "logits_48x48");
  expect_checkpoint_logits(*m.model, "vit_timm_io.safetensors", "input_32x48", "logits_32x48");
}

TEST(Parity, TimmVitMeanPoolNoClassToken) {
  LoadedModel m = load_model(data("vit_timm_avg.safetensors"), vit_options(4));
  EXPECT_EQ(m.model->config().vit().pool, Pool::avg);
  EXPECT_FALSE(m.model->config().vit().class_token);
  expect_checkpoint_logits(*m.model, "vit_timm_avg_io.safetensors", "input", "logits");
}

TEST(Parity, TorchvisionVit) {
  LoadedModel m = load_model(data("vit_tv.safetensors"), vit_options(4));
  EXPECT_EQ(m.format, "torchvision ViT");
  expect_checkpoint_logits(*m.model, "vit_tv_io.safetensors", "input", "logits");
}

TEST(Parity, TimmVitSmall224Synthetic) {
  SafeTensorsFile io = SafeTensorsFile::open(data("vit_s16_synth_io.safetensors"));
  ModelConfig c = preset("vit-small-patch16-224");
  c.vit().depth = 2;
  c.classes = 10;
  c.labels.clear();  // the preset's are ImageNet's 1000
  auto model = make_model(c, 0);
  for (Param* p : model->params())
    p->value.copy_from(testing::synthetic_tensor(p->name, p->value.shape()));
  // The generator must be the one Python used.
  for (const char* name : {"cls_token", "blocks.0.norm1.weight", "blocks.0.attn.qkv.bias"}) {
    Tensor want = io.get(std::string("check/") + name);
    Tensor got = testing::synthetic_tensor(name, want.shape());
    EXPECT_EQ(testing::max_rel_error(got, want), 0.0) << name;
  }
  Tensor x = testing::synthetic_tensor("input", {1, 3, 224, 224});
  const Tensor& got = model->forward(x);
  EXPECT_LT(testing::max_rel_error(got, io.get("logits")), 1e-4);
}

TEST(Parity, TimmSwin) {
  LoadedModel m = load_model(data("swin_timm.safetensors"), swin56());
  EXPECT_EQ(m.format, "timm Swin (>= 0.9)");
  const ModelConfig& c = m.model->config();
  EXPECT_EQ(c.swin().window, 7);
  EXPECT_EQ(c.swin().depths, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(c.swin().stage_heads, (std::vector<int64_t>{2, 4}));
  expect_checkpoint_logits(*m.model, "swin_timm_io.safetensors", "input", "logits");
}

TEST(Parity, TimmSwinOtherSizes) {
  LoadedModel m = load_model(data("swin_timm.safetensors"), swin56());
  expect_checkpoint_logits(*m.model, "swin_timm_io.safetensors", "input_56x112", "logits_56x112");
  expect_checkpoint_logits(*m.model, "swin_timm_io.safetensors", "input_64x64", "logits_64x64");
}

TEST(Parity, TimmSwinOldLayout) {
  LoadedModel m = load_model(data("swin_timm_old.safetensors"), swin56());
  EXPECT_EQ(m.format, "timm Swin (< 0.9 / Microsoft)");
  expect_checkpoint_logits(*m.model, "swin_timm_io.safetensors", "input", "logits");
}

TEST(Parity, TorchvisionSwin) {
  LoadedModel m = load_model(data("swin_tv.safetensors"), swin56());
  EXPECT_EQ(m.format, "torchvision Swin");
  expect_checkpoint_logits(*m.model, "swin_tv_io.safetensors", "input", "logits");
}

// A timm or torchvision ViT file does not store its heads: never guessed silently (ViT-H's head
// dim is 80, not the 64 of the smaller ones), refused with the flags that settle them.
TEST(Checkpoint, UnstatedHeadsAreRefusedWithTheFlagsThatSettleThem) {
  for (const char* file : {"vit_timm.safetensors", "vit_tv.safetensors"}) {
    const std::string m = testing::message_of([&] { load_model(data(file)); });
    EXPECT_NE(m.find("the attention heads (not stored in the file)"), std::string::npos) << m;
    EXPECT_NE(m.find("--heads N"), std::string::npos) << m;
    LoadOptions o;
    o.assume_defaults = true;
    const LoadedModel assumed = load_model(data(file), o);
    EXPECT_EQ(assumed.model->config().vit().heads, 1);  // dim 64 / head dim 64
  }
}

TEST(Checkpoint, NameMapping) {
  auto map = [](const std::string& name, const std::string& layout) {
    return map_checkpoint_name(name, *dialect(layout).dialect);
  };
  EXPECT_EQ(map("encoder.layers.encoder_layer_11.self_attention.in_proj_weight", "torchvision ViT"),
            "blocks.11.attn.qkv.weight");
  EXPECT_EQ(map("encoder.layers.encoder_layer_0.mlp.3.bias", "torchvision ViT"),
            "blocks.0.mlp.fc2.bias");
  EXPECT_EQ(map("heads.head.weight", "torchvision ViT"), "head.weight");
  EXPECT_EQ(map("features.5.3.mlp.0.weight", "torchvision Swin"),
            "layers.2.blocks.3.mlp.fc1.weight");
  EXPECT_EQ(map("features.6.reduction.weight", "torchvision Swin"),
            "layers.3.downsample.reduction.weight");
  EXPECT_EQ(map("layers.2.downsample.norm.bias", "timm Swin (< 0.9 / Microsoft)"),
            "layers.3.downsample.norm.bias");
  EXPECT_EQ(map("head.weight", "timm Swin (< 0.9 / Microsoft)"), "head.fc.weight");
  EXPECT_EQ(map("layers.0.blocks.1.attn_mask", "timm Swin (< 0.9 / Microsoft)"), "");
  EXPECT_EQ(map("layers.0.blocks.1.attn.relative_position_index", "timm Swin (>= 0.9)"), "");
}

TEST(Checkpoint, StrictLoadingListsEveryProblem) {
  ModelConfig c = preset("vit-fmnist");
  c.vit().depth = 1;
  auto model = make_model(c, 0);
  std::map<std::string, Tensor> tensors;
  for (Param* p : model->params()) tensors[p->name] = p->value.clone();
  tensors.erase("blocks.0.norm1.weight");
  tensors["blocks.7.extra"] = Tensor::zeros({3});
  tensors["head.weight"] = Tensor::zeros({11, 128});
  try {
    load_params(*model, tensors, "test.safetensors");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing (1):\n    blocks.0.norm1.weight [128]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected (1):\n    blocks.7.extra [3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head.weight: expected [10, 128], found [11, 128]"), std::string::npos)
        << msg;
  }
}

TEST(Checkpoint, BundledFashionModelIsTheVitFmnistPreset) {
  // The demo's checkpoint and the preset must not drift apart: `vitpe train --model vit-fmnist
  // --encoding sincos2d` is how the README says the bundled model was made.
  LoadedModel bundled =
      load_model(std::string(VITPE_SOURCE_DIR) + "/models/vit-fmnist.safetensors");
  ModelConfig want = preset("vit-fmnist");
  want.encoding = "sincos2d";
  EXPECT_EQ(bundled.model->config().to_json(), want.to_json());
  EXPECT_EQ(bundled.model->num_params(), 1193354);  // no class token: 128 fewer than with one
}

TEST(Checkpoint, OurFormatRoundTripRebuildsTheModel) {
  ModelConfig c = preset("swin-fmnist");
  c.encoding = "rope-mixed+learned1d";
  auto model = make_model(c, 5);
  const std::string path = std::string(VITPE_BINARY_DIR) + "/roundtrip_test.safetensors";
  save_model(*model, path);
  LoadedModel loaded = load_model(path);
  EXPECT_EQ(loaded.format, "vitpe");
  EXPECT_EQ(loaded.model->config().to_json(), c.to_json());
  Tensor x = testing::random_tensor({2, 1, 28, 28}, 1);
  Tensor a = model->forward(x).clone();
  EXPECT_EQ(testing::max_rel_error(loaded.model->forward(x), a), 0.0);
  std::filesystem::remove(path);
}

// CPVT's PEG (a conditional encoding) is saved and loaded under its names, pos_block.proj.*: its
// weights, moved away from the initial ones, come back and give the same logits.
TEST(Checkpoint, OurFormatRoundTripKeepsThePeg) {
  ModelConfig c = preset("vit-fmnist");
  c.encoding = "peg+relbias";
  auto model = make_model(c, 5);
  int64_t moved = 0;
  for (Param* p : model->params()) {
    if (p->name.rfind("pos_block.proj.", 0) != 0) continue;
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.at(i) += 0.25f;
    ++moved;
  }
  EXPECT_EQ(moved, 2);  // weight and bias
  const std::string path = std::string(VITPE_BINARY_DIR) + "/roundtrip_peg_test.safetensors";
  save_model(*model, path);
  LoadedModel loaded = load_model(path);
  EXPECT_EQ(loaded.model->config().to_json(), c.to_json());
  EXPECT_EQ(loaded.model->num_encoding_params(), model->num_encoding_params());
  Tensor x = testing::random_tensor({2, 1, 28, 28}, 1);
  Tensor a = model->forward(x).clone();
  EXPECT_EQ(testing::max_rel_error(loaded.model->forward(x), a), 0.0);
  std::filesystem::remove(path);
}

// Our checkpoint's tensors under a metadata config edited by `edit`, written to `name`.
std::string with_edited_config(const std::string& name,
                               const std::function<void(nlohmann::json&)>& edit) {
  auto model = make_model(preset("vit-fmnist"), 1);
  nlohmann::json j = nlohmann::json::parse(model->config().to_json());
  edit(j);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Param* p : model->params()) tensors.emplace_back(p->name, p->value);
  const std::string path = std::string(VITPE_BINARY_DIR) + "/" + name;
  save_safetensors(path, tensors, {{"vitpe.config", j.dump()}, {"format", "pt"}});
  return path;
}

// A config in the metadata that does not fit the tensors (here: depth 1000 over 6 blocks) is
// refused before the model is built, naming the field; absurd sizes (depth 1e6, 66 Swin stages,
// once unbounded allocation and a shift by 64) are refused by the config's own bounds.
TEST(Checkpoint, ConfigMustFitTheTensorsBeforeAnythingIsAllocated) {
  std::string p = with_edited_config("deep_config.safetensors", [](auto& j) { j["depth"] = 1000; });
  std::string m = testing::message_of([&] { load_model(p); });
  EXPECT_NE(m.find("depth 1000, the tensors say 6"), std::string::npos) << m;
  EXPECT_NE(m.find("deep_config.safetensors"), std::string::npos) << m;
  p = with_edited_config("huge_config.safetensors", [](auto& j) { j["depth"] = 1000000; });
  m = testing::message_of([&] { load_model(p); });
  EXPECT_NE(m.find("depth must be in 1..1024, found 1000000"), std::string::npos) << m;
  p = with_edited_config("wide_config.safetensors", [](auto& j) { j["mlp_dim"] = 4096; });
  m = testing::message_of([&] { load_model(p); });
  EXPECT_NE(m.find("mlp_dim 4096, the tensors say 512"), std::string::npos) << m;
  std::filesystem::remove(std::string(VITPE_BINARY_DIR) + "/deep_config.safetensors");
  std::filesystem::remove(std::string(VITPE_BINARY_DIR) + "/huge_config.safetensors");
  std::filesystem::remove(p);

  ModelConfig swin = preset("swin-fmnist");
  swin.swin().depths.assign(66, 1);
  swin.swin().stage_heads.assign(66, 2);
  m = testing::message_of([&] { swin.validate(); });
  EXPECT_NE(m.find("1 to 8 stages"), std::string::npos) << m;
}

// A timm pos_embed without patch rows ([1, 0, D]) is an error, not a square root of -1.
// A timm Swin file does not store its image size; timm's sizes put the last stage's grid at the
// window (224 for window 7, 384 for window 12), which the unclamped last table confirms. The
// swin-fmnist shape: window 7, patch 2, two stages -> 7 x 2 x 2 = 28.
TEST(Checkpoint, SwinImageSizeFromTheLastStagesWindow) {
  auto model = make_model(preset("swin-fmnist"), 1);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Param* p : model->params()) tensors.emplace_back(p->name, p->value);
  const std::string path = std::string(VITPE_BINARY_DIR) + "/swin_size.safetensors";
  save_safetensors(path, tensors);
  LoadedModel m = load_model(path);
  EXPECT_EQ(m.format, "timm Swin (>= 0.9)");
  EXPECT_EQ(m.model->config().img_rows, 28);
  EXPECT_EQ(m.model->config().swin().window, 7);
  bool noted = false;
  for (const auto& n : m.notes) noted |= n.find("28x28 assumed") != std::string::npos;
  EXPECT_TRUE(noted);
  std::filesystem::remove(path);
}

TEST(Checkpoint, EmptyPosEmbedIsAnError) {
  auto model = make_model(preset("vit-tiny-patch16-224"), 1);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Param* p : model->params()) {
    tensors.emplace_back(p->name, p->name == "pos_embed" ? Tensor::zeros({1, 0, 192}) : p->value);
  }
  const std::string path = std::string(VITPE_BINARY_DIR) + "/empty_pos_embed.safetensors";
  save_safetensors(path, tensors);
  const std::string m = testing::message_of([&] { load_model(path); });
  EXPECT_NE(m.find("pos_embed has 0 rows, not a square grid"), std::string::npos) << m;
  std::filesystem::remove(path);
}

TEST(Checkpoint, UnknownFilesAndPresetsAreClearErrors) {
  EXPECT_THROW(load_model(data("preprocess_golden.safetensors")), std::runtime_error);
  try {
    load_model("no-such-model-or-file");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-model-or-file"), std::string::npos);
  }
}

}  // namespace
}  // namespace vitpe
