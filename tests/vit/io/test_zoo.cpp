// timm's model-zoo families beyond the plain ViT and Swin (#16), each loaded from a file under
// timm's names, with no conversion step, and matched against timm's logits at two sizes
// (tests/golden/make_zoo_goldens.py). The weights are synthetic, a function of each tensor's
// name (tests/golden/synthetic_weights.h): the test writes the checkpoint and checks its names
// and shapes against the hash of timm's state dict.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <tuple>

#include "tests/golden/synthetic_weights.h"
#include "tests/testing.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

std::string zoo(const std::string& name) { return std::string(VITPE_TEST_DATA) + "/zoo/" + name; }

// How a file names a parameter: its timm names and shapes for one of ours (default: the same).
using Renamer =
    std::function<std::vector<std::pair<std::string, Shape>>(const std::string&, const Shape&)>;

// Writes the checkpoint of a model of config `c` with synthetic weights under timm's names (a
// function of each name), after checking the names and shapes against `want_hash` (timm's state
// dict).
std::string write_timm_file(const ModelConfig& c, const std::string& want_hash,
                            const std::string& file, const Renamer& rename = {}) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  auto model = make_model(c, 0);
  for (Param* p : model->params()) {
    if (!rename) {
      tensors.emplace_back(p->name, testing::synthetic_tensor(p->name, p->value.shape()));
      continue;
    }
    for (const auto& [name, shape] : rename(p->name, p->value.shape())) {
      tensors.emplace_back(name, testing::synthetic_tensor(name, shape));
    }
  }
  EXPECT_EQ(testing::state_dict_hash(tensors), want_hash)
      << "not timm's state dict (names or shapes differ)";
  const fs::path dir = fs::temp_directory_path() / ("vitpe_zoo_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / file).string();
  save_safetensors(path, tensors);
  return path;
}

ModelConfig small_vit() {
  ModelConfig c;
  c.img_rows = c.img_cols = 32;
  c.patch = 8;
  c.dim = 64;
  c.depth = 2;
  c.heads = 4;
  c.mlp_dim = 256;
  c.classes = 10;
  c.labels.clear();
  return c;
}

void expect_logits(Model& m, const Tensor& x, const Tensor& want, const std::string& what) {
  const Tensor& got = m.forward(x);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_LT(testing::max_rel_error(got, want), 1e-4) << what;
}

// Writes the synthetic checkpoint of config `c` under timm's names, loads it as a user would (only
// the heads given: timm's files do not store them), checks the config read from the tensors with
// `check`, and compares the logits with timm's at 32x32 and 48x32.
void check_family(const std::string& golden, const ModelConfig& c,
                  const std::function<void(const LoadedModel&)>& check) {
  SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
  const std::string path = write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), golden);
  LoadOptions o;
  o.heads = c.heads;
  LoadedModel m = load_model(path, o);
  EXPECT_EQ(m.format, CheckpointFormat::timm_vit) << golden;
  EXPECT_EQ(m.model->config().img_rows, 32) << golden;  // a 4 x 4 grid in pos_embed
  check(m);
  expect_logits(*m.model, testing::synthetic_tensor("input", {2, 3, 32, 32}), io.get("logits"),
                golden + " at 32x32");
  expect_logits(*m.model, testing::synthetic_tensor("input_48x32", {1, 3, 48, 32}),
                io.get("logits_48x32"), golden + " at 48x32 (pos_embed resampled)");
  // Converted to our format (vitpe convert), the file alone rebuilds the same model.
  const std::string ours = path + ".vitpe.safetensors";
  save_model(*m.model, ours);
  LoadedModel back = load_model(ours);
  EXPECT_EQ(back.format, CheckpointFormat::vitpe) << golden;
  EXPECT_EQ(back.model->config().to_json(), m.model->config().to_json()) << golden;
  expect_logits(*back.model, testing::synthetic_tensor("input", {2, 3, 32, 32}), io.get("logits"),
                golden + " converted");
  fs::remove_all(fs::path(path).parent_path());
}

TEST(Zoo, Deit3LayerScaleAndNoEmbedClass) {
  ModelConfig c = small_vit();
  c.layer_scale = 1e-6;
  c.no_embed_class = true;
  check_family("deit3_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_GT(got.layer_scale, 0);
    EXPECT_TRUE(got.no_embed_class);
    EXPECT_EQ(model_family(got), "DeiT-III");
  });
}

// DeiT distilled: class and distillation tokens, both with position rows, two heads whose mean
// is the output (timm's VisionTransformerDistilled at inference).
TEST(Zoo, DeitDistilledTokenAndHead) {
  ModelConfig c = small_vit();
  c.dist_token = true;
  check_family("deit_dist_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_TRUE(got.dist_token);
    EXPECT_EQ(got.prefix_tokens(), 2);
    EXPECT_EQ(model_family(got), "DeiT distilled");
  });
}

// BEiT as timm names it: gamma_1 / gamma_2 for the layer scale, q_bias and v_bias (no key bias)
// for the qkv bias.
std::vector<std::pair<std::string, Shape>> beit_names(const std::string& name, const Shape& s) {
  auto ends = [&](const std::string& tail) {
    return name.size() > tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const std::string block = name.substr(0, name.find('.', 7) + 1);  // "blocks.N."
  if (ends(".ls1.gamma")) return {{block + "gamma_1", s}};
  if (ends(".ls2.gamma")) return {{block + "gamma_2", s}};
  if (ends(".attn.qkv.bias")) {
    const Shape d{s[0] / 3};
    return {{block + "attn.q_bias", d}, {block + "attn.v_bias", d}};
  }
  return {{name, s}};
}

// BEiT: no position table, relbias in every block with the three class-token entries, q/v bias
// without k bias, layer scale, mean pooling with fc_norm. Two natively built sizes (timm
// resizes BEiT's tables with unilm's geometric interpolation, which vitpe does not reproduce).
TEST(Zoo, BeitQvBiasRelativeBiasWithClassEntries) {
  for (const auto& [golden, rows, cols] : {std::tuple{"beit_synth_io.safetensors", 32, 32},
                                           std::tuple{"beit_48x32_synth_io.safetensors", 48, 32}}) {
    SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
    ModelConfig c = small_vit();
    c.img_rows = rows;
    c.img_cols = cols;
    c.encoding = "relbias";
    c.pool = Pool::avg;
    c.layer_scale = 0.1;
    const std::string path =
        write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), golden, beit_names);
    LoadOptions o;
    o.heads = 4;
    if (rows != cols) {  // a square size is read from the relative table; this one is not
      o.img_rows = rows;
      o.img_cols = cols;
    }
    LoadedModel m = load_model(path, o);
    EXPECT_EQ(m.model->config().img_rows, rows);
    EXPECT_EQ(m.model->config().img_cols, cols);
    EXPECT_EQ(m.format, CheckpointFormat::timm_vit);
    EXPECT_EQ(m.model->config().encoding, "relbias");
    EXPECT_EQ(model_family(m.model->config()), "BEiT");
    const int64_t batch = rows == 32 ? 2 : 1;
    expect_logits(
        *m.model,
        testing::synthetic_tensor(rows == 32 ? "input" : "input_48x32", {batch, 3, rows, cols}),
        io.get("logits"), golden);
    fs::remove_all(fs::path(path).parent_path());
  }
}

// A BEiT file with only one of q_bias / v_bias is an error naming the tensor.
TEST(Zoo, BeitHalfAQkvBiasIsAnError) {
  ModelConfig c = small_vit();
  c.encoding = "relbias";
  c.pool = Pool::avg;
  c.layer_scale = 0.1;
  auto model = make_model(c, 0);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Param* p : model->params()) {
    for (const auto& [name, shape] : beit_names(p->name, p->value.shape())) {
      if (name != "blocks.1.attn.v_bias") tensors.emplace_back(name, Tensor::zeros(shape));
    }
  }
  const fs::path path =
      fs::temp_directory_path() / ("vitpe_beit_half_" + std::to_string(::getpid()));
  save_safetensors(path.string(), tensors);
  const std::string m = testing::message_of([&] { load_model(path.string()); });
  EXPECT_NE(m.find("blocks.1.attn.q_bias without blocks.1.attn.v_bias"), std::string::npos) << m;
  fs::remove(path);
}

// Register tokens (Darcet et al.), as timm's reg_tokens: after the class token, with rows in
// pos_embed, class-token pooling.
TEST(Zoo, RegisterTokensWithClassToken) {
  ModelConfig c = small_vit();
  c.reg_tokens = 4;
  check_family("reg_cls_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_EQ(got.reg_tokens, 4);
    EXPECT_FALSE(got.no_embed_class);
    EXPECT_EQ(got.prefix_tokens(), 5);
  });
}

// timm's vit_*_reg4_gap_256: no class token, 4 registers without position rows, mean pooling of
// the patch tokens (registers excluded) with fc_norm, layer scale.
TEST(Zoo, RegisterTokensMeanPoolingNoEmbedClass) {
  ModelConfig c = small_vit();
  c.class_token = false;
  c.pool = Pool::avg;
  c.reg_tokens = 4;
  c.no_embed_class = true;
  c.layer_scale = 1e-5;
  check_family("reg_gap_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_EQ(got.reg_tokens, 4);
    EXPECT_FALSE(got.class_token);
    EXPECT_TRUE(got.no_embed_class);
    EXPECT_EQ(got.pool, Pool::avg);
    EXPECT_NE(model_family(got).find("4 register tokens"), std::string::npos) << model_family(got);
  });
}

TEST(Zoo, Deit3PresetsHaveTimmsShapes) {
  for (const char* name :
       {"deit3_small_patch16_224", "deit3_base_patch16_384", "deit3_huge_patch14_224"}) {
    const ModelConfig c = preset(name);
    EXPECT_TRUE(c.no_embed_class) << name;
    EXPECT_DOUBLE_EQ(c.layer_scale, 1e-6) << name;
    EXPECT_EQ(c.labels.size(), 1000u);
  }
  auto m = make_model(preset("deit3_small_patch16_224"), 0);
  bool ls = false;
  for (Param* p : m->params()) {
    if (p->name == "pos_embed") {
      EXPECT_EQ(p->value.shape(), (Shape{1, 196, 384}));
    }
    ls |= p->name == "blocks.11.ls2.gamma";
  }
  EXPECT_TRUE(ls);
  // timm's fb_in1k preprocessing: ImageNet statistics, crop 0.9 at 224, 1.0 at 384.
  EXPECT_DOUBLE_EQ(preset("deit3_small_patch16_224").crop_pct, 0.9);
  EXPECT_DOUBLE_EQ(preset("deit3_small_patch16_384").crop_pct, 1.0);
  EXPECT_EQ(preset("deit3_small_patch16_384").img_rows, 384);
}

// Parameter counts of timm 1.0.31's models of the same names (sum of p.numel()): one preset of
// each structure (the larger sizes differ only in widths and depths; building them all would
// take minutes under the sanitizers).
TEST(Zoo, PresetParameterCountsAreTimms) {
  const std::pair<const char*, int64_t> want[] = {
      {"vit_tiny_patch16_384", 5790376},           {"vit_small_patch32_224", 22878952},
      {"deit_tiny_patch16_224", 5717416},          {"deit_small_distilled_patch16_224", 22436432},
      {"deit3_small_patch16_224", 22059496},       {"vit_medium_patch16_reg4_gap_256", 38881768},
      {"swin_small_patch4_window7_224", 49606258},
  };
  for (const auto& [name, count] : want) {
    EXPECT_EQ(make_model(preset(name), 0)->num_params(), count) << name;
  }
}

}  // namespace
}  // namespace vitpe
