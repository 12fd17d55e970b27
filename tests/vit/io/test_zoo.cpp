// timm's model-zoo families beyond the plain ViT and Swin, each loaded from a file under
// timm's names, with no conversion step, and matched against timm's logits at two sizes
// (tests/golden/make_zoo_goldens.py). The weights are synthetic, a function of each tensor's
// name (tests/golden/synthetic_weights.h): the test writes the checkpoint and checks its names
// and shapes against the hash of timm's state dict.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <tuple>

#include "tests/golden/synthetic_weights.h"
#include "tests/testing.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"
#include "vit/models/family.h"

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
  c.vit().dim = 64;
  c.vit().depth = 2;
  c.vit().heads = 4;
  c.vit().mlp_dim = 256;
  c.classes = 10;
  c.labels.clear();
  return c;
}

void expect_zoo_logits(Model& m, const Tensor& x, const Tensor& want, const std::string& what) {
  const Tensor& got = m.forward(x);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_LT(testing::max_rel_error(got, want), 1e-4) << what;
}

// The loaded model against the golden's logits at 32x32 and 48x32; converted to our format
// (vitpe convert), the file alone rebuilds the same model. Removes the written files.
void expect_two_sizes_and_round_trip(const LoadedModel& m, SafeTensorsFile& io,
                                     const std::string& golden, const std::string& path) {
  expect_zoo_logits(*m.model, testing::synthetic_tensor("input", {2, 3, 32, 32}), io.get("logits"),
                    golden + " at 32x32");
  expect_zoo_logits(*m.model, testing::synthetic_tensor("input_48x32", {1, 3, 48, 32}),
                    io.get("logits_48x32"), golden + " at 48x32");
  const std::string ours = path + ".vitpe.safetensors";
  save_model(*m.model, ours);
  LoadedModel back = load_model(ours);
  EXPECT_EQ(back.format, "vitpe") << golden;
  EXPECT_EQ(back.model->config().to_json(), m.model->config().to_json()) << golden;
  expect_zoo_logits(*back.model, testing::synthetic_tensor("input", {2, 3, 32, 32}),
                    io.get("logits"), golden + " converted");
  fs::remove_all(fs::path(path).parent_path());
}

// Writes the synthetic checkpoint of config `c` under timm's names, loads it as a user would (only
// the heads given: timm's files do not store them), checks the config read from the tensors with
// `check`, and compares the logits with timm's at 32x32 and 48x32.
// `rename` gives timm's names where they differ from ours; `o` what a user passes (default: the
// heads, which a ViT file does not store).
void check_family(const std::string& golden, const ModelConfig& c,
                  const std::function<void(const LoadedModel&)>& check, const Renamer& rename = {},
                  std::optional<LoadOptions> options = std::nullopt) {
  SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
  const std::string path =
      write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), golden, rename);
  LoadOptions o;
  o.heads = c.vit().heads;
  if (options) o = *options;
  LoadedModel m = load_model(path, o);
  EXPECT_EQ(m.format, "timm ViT") << golden;
  EXPECT_EQ(m.model->config().img_rows, 32) << golden;  // a 4 x 4 grid in pos_embed
  check(m);
  expect_two_sizes_and_round_trip(m, io, golden, path);
}

TEST(Zoo, Deit3LayerScaleAndNoEmbedClass) {
  ModelConfig c = small_vit();
  c.vit().layer_scale = 1e-6;
  c.vit().no_embed_class = true;
  check_family("deit3_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_GT(got.vit().layer_scale, 0);
    EXPECT_TRUE(got.vit().no_embed_class);
    EXPECT_EQ(got.family_label(), "DeiT-III");
  });
}

// DeiT distilled: class and distillation tokens, both with position rows, two heads whose mean
// is the output (timm's VisionTransformerDistilled at inference).
TEST(Zoo, DeitDistilledTokenAndHead) {
  ModelConfig c = small_vit();
  c.vit().dist_token = true;
  check_family("deit_dist_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_TRUE(got.vit().dist_token);
    EXPECT_EQ(got.prefix_tokens(), 2);
    EXPECT_EQ(got.family_label(), "DeiT distilled");
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
// without k bias, layer scale, mean pooling with fc_norm. Two natively built sizes, and the
// 32x32 weights at 48x32 (the tables resized with timm's geometric scheme, resize=beit).
TEST(Zoo, BeitQvBiasRelativeBiasWithClassEntries) {
  for (const auto& [golden, rows, cols] : {std::tuple{"beit_synth_io.safetensors", 32, 32},
                                           std::tuple{"beit_48x32_synth_io.safetensors", 48, 32}}) {
    SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
    ModelConfig c = small_vit();
    c.img_rows = rows;
    c.img_cols = cols;
    c.encoding = "relbias";
    c.vit().pool = Pool::avg;
    c.vit().layer_scale = 0.1;
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
    EXPECT_EQ(m.format, "timm ViT");
    EXPECT_EQ(m.model->config().encoding, "relbias:resize=beit");
    EXPECT_EQ(m.model->config().family_label(), "BEiT");
    const int64_t batch = rows == 32 ? 2 : 1;
    expect_zoo_logits(
        *m.model,
        testing::synthetic_tensor(rows == 32 ? "input" : "input_48x32", {batch, 3, rows, cols}),
        io.get("logits"), golden);
    if (rows == 32) {
      // The 32x32 file at 48x32: the tables resized as timm's checkpoint_filter_fn does.
      expect_zoo_logits(*m.model, testing::synthetic_tensor("input_48x32", {1, 3, 48, 32}),
                        io.get("logits_48x32_resized"), std::string(golden) + " resized to 48x32");
    }
    fs::remove_all(fs::path(path).parent_path());
  }
}

// A BEiT file with only one of q_bias / v_bias is an error naming the tensor.
TEST(Zoo, BeitHalfAQkvBiasIsAnError) {
  ModelConfig c = small_vit();
  c.encoding = "relbias";
  c.vit().pool = Pool::avg;
  c.vit().layer_scale = 0.1;
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
  c.vit().reg_tokens = 4;
  check_family("reg_cls_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_EQ(got.vit().reg_tokens, 4);
    EXPECT_FALSE(got.vit().no_embed_class);
    EXPECT_EQ(got.prefix_tokens(), 5);
  });
}

// timm's vit_*_reg4_gap_256: no class token, 4 registers without position rows, mean pooling of
// the patch tokens (registers excluded) with fc_norm, layer scale.
TEST(Zoo, RegisterTokensMeanPoolingNoEmbedClass) {
  ModelConfig c = small_vit();
  c.vit().class_token = false;
  c.vit().pool = Pool::avg;
  c.vit().reg_tokens = 4;
  c.vit().no_embed_class = true;
  c.vit().layer_scale = 1e-5;
  check_family("reg_gap_synth_io.safetensors", c, [](const LoadedModel& m) {
    const ModelConfig& got = m.model->config();
    EXPECT_EQ(got.vit().reg_tokens, 4);
    EXPECT_FALSE(got.vit().class_token);
    EXPECT_TRUE(got.vit().no_embed_class);
    EXPECT_EQ(got.vit().pool, Pool::avg);
    EXPECT_NE(got.family_label().find("4 register tokens"), std::string::npos)
        << got.family_label();
  });
}

// timm's Eva as RoPE-ViT: gamma_1 / gamma_2 for the layer scale, one "rope.freqs" [2, depth, H,
// hd/2] for the mixed frequencies of all blocks; with q_bias / v_bias when `qv_bias`.
Renamer eva_names(int64_t depth, bool qv_bias) {
  return [depth, qv_bias](const std::string& name,
                          const Shape& s) -> std::vector<std::pair<std::string, Shape>> {
    const std::string block = name.substr(0, name.find('.', 7) + 1);  // "blocks.N."
    if (name.size() > 16 && name.compare(name.size() - 16, 16, ".attn.rope.freqs") == 0) {
      if (block != "blocks.0.") return {};
      return {{"rope.freqs", Shape{2, depth, s[1], s[2]}}};
    }
    if (!qv_bias && name.find(".attn.qkv.bias") != std::string::npos) return {{name, s}};
    return beit_names(name, s);
  };
}

ModelConfig small_eva(const std::string& encoding) {
  ModelConfig c = small_vit();
  c.vit().layer_scale = 1e-5;
  c.encoding = encoding;
  return c;
}

// vit_*_patch16_rope_224: nothing in the file tells the axial RoPE (timm computes it in code), so
// the load says so and --encoding (or the preset) gives it.
TEST(Zoo, EvaRopeAxialNeedsTheEncodingNamed) {
  const ModelConfig c = small_eva("rope-axial");
  LoadOptions o;
  o.heads = 4;
  o.img_rows = o.img_cols = 32;
  o.encoding = "rope-axial";
  check_family(
      "eva_rope_synth_io.safetensors", c,
      [](const LoadedModel& m) {
        EXPECT_EQ(m.model->config().encoding, "rope-axial");
        EXPECT_EQ(m.model->config().family_label(), "RoPE-ViT (Eva) axial");
      },
      eva_names(2, false), o);
  // Without --encoding nothing tells the rotation: the file is refused with the flags that
  // settle it, and only --assume-defaults loads it as 'none' (saying so).
  SafeTensorsFile io = SafeTensorsFile::open(zoo("eva_rope_synth_io.safetensors"));
  const std::string path = write_timm_file(c, io.metadata().at("state_dict_fnv1a64"),
                                           "eva_plain.safetensors", eva_names(2, false));
  o.encoding.clear();
  const std::string refused = testing::message_of([&] { load_model(path, o); });
  EXPECT_NE(refused.find("does not tell one part of the model"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--encoding rope-axial"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--assume-defaults"), std::string::npos) << refused;
  o.assume_defaults = true;
  LoadedModel m = load_model(path, o);
  EXPECT_EQ(m.model->config().encoding.str(), "none");
  bool said = false;
  for (const std::string& n : m.notes) said |= n.find("assumed: the position encoding") == 0;
  EXPECT_TRUE(said);
  fs::remove_all(fs::path(path).parent_path());
}

// vit_*_patch16_rope_mixed_ape_224: rope.freqs split over the blocks (heads read from it), a
// position table without a class row; both read off the file.
TEST(Zoo, EvaRopeMixedWithApeIsReadOffTheFile) {
  ModelConfig c = small_eva("learned1d+rope-mixed");
  c.vit().no_embed_class = true;
  LoadOptions o;  // no heads: rope.freqs has them
  check_family(
      "eva_rope_mixed_ape_synth_io.safetensors", c,
      [](const LoadedModel& m) {
        const ModelConfig& got = m.model->config();
        EXPECT_EQ(got.encoding, "learned1d+rope-mixed");
        EXPECT_EQ(got.vit().heads, 4);
        EXPECT_TRUE(got.vit().no_embed_class);
        EXPECT_EQ(got.family_label(), "RoPE-ViT (Eva) mixed + APE");
      },
      eva_names(2, false), o);
}

// vit_*_patch16_rope_reg1_gap_256: a register token, mean pooling, q/v bias, axial RoPE with
// Eva's defaults (ij, theta 10000) and ref_feat_shape: at 48x32 the rows are rescaled by 4/6.
TEST(Zoo, EvaRegisterGapRopeWithReferenceGrid) {
  const std::string spec = "rope-axial:theta=10000,indexing=ij,ref=4x4";
  ModelConfig c = small_eva(spec);
  c.vit().class_token = false;
  c.vit().reg_tokens = 1;
  c.vit().pool = Pool::avg;
  LoadOptions o;
  o.heads = 4;
  o.img_rows = o.img_cols = 32;
  o.encoding = spec;
  check_family(
      "eva_reg_gap_synth_io.safetensors", c,
      [&](const LoadedModel& m) {
        EXPECT_EQ(m.model->config().encoding, spec);
        EXPECT_EQ(m.model->config().vit().reg_tokens, 1);
      },
      eva_names(2, true), o);
}

// A config.json beside the weights whose architecture is a preset gives the whole config (the
// way a timm hub download of an Eva RoPE-ViT loads with no flag); a bad rope.freqs is an error.
TEST(Zoo, EvaConfigJsonArchitectureNamesThePreset) {
  ModelConfig c = preset("vit_small_patch16_rope_224");
  c.vit().depth = 12;
  auto model = make_model(c, 0);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Param* p : model->params()) {
    for (const auto& [name, shape] : eva_names(12, false)(p->name, p->value.shape())) {
      tensors.emplace_back(name, Tensor::zeros(shape));
    }
  }
  const fs::path dir = fs::temp_directory_path() / ("vitpe_eva_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  save_safetensors((dir / "model.safetensors").string(), tensors);
  {
    std::ofstream j(dir / "config.json");
    j << R"({"architecture": "vit_small_patch16_rope_224", "num_classes": 1000,
             "pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0.9}})";
  }
  LoadedModel m = load_model((dir / "model.safetensors").string());
  EXPECT_EQ(m.model->config().encoding, "rope-axial");
  EXPECT_EQ(m.model->config().name, "vit_small_patch16_rope_224");
  EXPECT_EQ(m.model->config().vit().heads, 6);
  // --encoding on our own format is refused: the file records its encoding.
  save_model(*m.model, (dir / "ours.safetensors").string());
  LoadOptions o;
  o.encoding = "sincos2d";
  const std::string msg =
      testing::message_of([&] { load_model((dir / "ours.safetensors").string(), o); });
  EXPECT_NE(msg.find("records its encoding ('rope-axial')"), std::string::npos) << msg;
  fs::remove_all(dir);

  // rope.freqs for 3 blocks in a 2-block file.
  ModelConfig mc = small_eva("rope-mixed");
  auto mixed = make_model(mc, 0);
  tensors.clear();
  for (Param* p : mixed->params()) {
    for (const auto& [name, shape] : eva_names(3, false)(p->name, p->value.shape())) {
      tensors.emplace_back(name, Tensor::zeros(shape));
    }
  }
  fs::create_directories(dir);
  save_safetensors((dir / "bad.safetensors").string(), tensors);
  const std::string bad =
      testing::message_of([&] { load_model((dir / "bad.safetensors").string()); });
  EXPECT_NE(bad.find("rope.freqs: expected [2, depth 2"), std::string::npos) << bad;
  fs::remove_all(dir);
}

// EVA-02 base/large as timm names them: separate q/k/v projections (k without a bias) and the
// SwiGLU's gate and value projections.
std::vector<std::pair<std::string, Shape>> eva02_split_names(const std::string& name,
                                                             const Shape& s) {
  auto ends = [&](const std::string& tail) {
    return name.size() > tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const std::string stem = name.substr(0, name.rfind('.', name.rfind('.') - 1) + 1);
  if (ends("attn.qkv.weight")) {
    const Shape w{s[0] / 3, s[1]};
    return {{stem + "q_proj.weight", w}, {stem + "k_proj.weight", w}, {stem + "v_proj.weight", w}};
  }
  if (ends("attn.qkv.bias"))
    return {{stem + "q_proj.bias", {s[0] / 3}}, {stem + "v_proj.bias", {s[0] / 3}}};
  if (ends("mlp.fc1.weight")) {
    const Shape w{s[0] / 2, s[1]};
    return {{stem + "fc1_g.weight", w}, {stem + "fc1_x.weight", w}};
  }
  if (ends("mlp.fc1.bias"))
    return {{stem + "fc1_g.bias", {s[0] / 2}}, {stem + "fc1_x.bias", {s[0] / 2}}};
  return {{name, s}};
}

// EVA-02: SwiGLU MLPs (fused GluMlp in tiny/small; separate projections and a norm in base/large),
// q/v bias, a position table with the class row plus axial RoPE with Eva's defaults and a
// reference grid, mean pooling.
TEST(Zoo, Eva02SwigluMlpAndRope) {
  const std::string spec = "learned1d+rope-axial:theta=10000,indexing=ij,ref=4x4";
  for (const bool split : {false, true}) {
    ModelConfig c = small_vit();
    c.encoding = spec;
    c.vit().pool = Pool::avg;
    c.vit().mlp = Mlp::swiglu;
    c.vit().mlp_dim = 64 * 8 / 3;
    c.vit().mlp_norm = split;
    LoadOptions o;
    o.heads = 4;
    o.encoding = spec;
    check_family(
        split ? "eva02_swiglu_synth_io.safetensors" : "eva02_glu_synth_io.safetensors", c,
        [&](const LoadedModel& m) {
          const ModelConfig& got = m.model->config();
          EXPECT_EQ(got.vit().mlp, Mlp::swiglu);
          EXPECT_EQ(got.vit().mlp_dim, 170);
          EXPECT_EQ(got.vit().mlp_norm, split);
          EXPECT_EQ(got.family_label().substr(0, 6), "EVA-02");
        },
        split ? Renamer(eva02_split_names) : Renamer(beit_names), o);
  }
}

// Split projections with a part missing or mis-shaped are errors naming the tensors.
TEST(Zoo, Eva02SplitProjectionsMustBeComplete) {
  ModelConfig c = small_vit();
  c.vit().pool = Pool::avg;
  c.vit().mlp = Mlp::swiglu;
  c.vit().mlp_dim = 170;
  c.vit().mlp_norm = true;
  auto model = make_model(c, 0);
  auto write = [&](const std::string& drop, const std::string& reshape) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (Param* p : model->params()) {
      for (const auto& [name, shape] : eva02_split_names(p->name, p->value.shape())) {
        if (name == drop) continue;
        tensors.emplace_back(name, Tensor::zeros(name == reshape ? Shape{3, 64} : shape));
      }
    }
    const fs::path path = fs::temp_directory_path() / ("vitpe_eva02_" + std::to_string(::getpid()));
    save_safetensors(path.string(), tensors);
    LoadOptions o;
    o.heads = 4;
    const std::string m = testing::message_of([&] { load_model(path.string(), o); });
    fs::remove(path);
    return m;
  };
  const std::string missing = write("blocks.1.attn.k_proj.weight", "");
  EXPECT_NE(missing.find("blocks.1.attn.k_proj.weight missing beside blocks.1.attn.q_proj.weight"),
            std::string::npos)
      << missing;
  const std::string shaped = write("", "blocks.0.mlp.fc1_x.weight");
  EXPECT_NE(shaped.find("blocks.0.mlp.fc1_{g,x}.weight: the parts have different shapes"),
            std::string::npos)
      << shaped;
}

// timm's Swin V2 names: q_bias / v_bias for our qkv bias (no k bias).
std::vector<std::pair<std::string, Shape>> swinv2_names(const std::string& name, const Shape& s) {
  const std::string tail = "attn.qkv.bias";
  if (name.size() > tail.size() &&
      name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
    const std::string attn = name.substr(0, name.size() - 8);  // "...attn."
    const Shape d{s[0] / 3};
    return {{attn + "q_bias", d}, {attn + "v_bias", d}};
  }
  return {{name, s}};
}

ModelConfig small_swinv2() {
  ModelConfig c = preset("swinv2_tiny_window8_256");
  c.img_rows = c.img_cols = 32;
  c.patch = 4;
  c.swin().window = 4;
  c.swin().dim = 32;
  c.swin().depths = {2, 2};
  c.swin().stage_heads = {2, 4};
  c.classes = 10;
  c.labels.clear();
  return c;
}

// Swin V2: post-norm blocks, cosine attention with logit_scale, q/v biases, the cpb encoding and
// merging normalised after the reduction, read off timm's names (the window given: V2 files do
// not store it); at 48x32 the second stage pads and clamps its window.
TEST(Zoo, SwinV2CosineAttentionPostNormCpb) {
  const std::string golden = "swinv2_synth_io.safetensors";
  SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
  const ModelConfig c = small_swinv2();
  const std::string path =
      write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), golden, swinv2_names);
  LoadOptions o;
  o.window = 4;
  LoadedModel m = load_model(path, o);
  const ModelConfig& got = m.model->config();
  EXPECT_EQ(m.format, "timm Swin (>= 0.9)");
  EXPECT_TRUE(got.swin().v2);
  EXPECT_EQ(got.encoding, "cpb");
  EXPECT_EQ(got.swin().stage_heads, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(got.swin().window, 4);
  EXPECT_EQ(got.family_label(), "Swin V2");
  // Without --window nothing tells the window: refused with the flags that settle it; with
  // --assume-defaults timm's most common one, said in the notes.
  const std::string refused = testing::message_of([&] { load_model(path); });
  EXPECT_NE(refused.find("Swin V2's window (not stored in the file): 8 assumed"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("--window N"), std::string::npos) << refused;
  LoadOptions assume;
  assume.assume_defaults = true;
  LoadedModel guessed = load_model(path, assume);
  EXPECT_EQ(guessed.model->config().swin().window, 8);
  bool said = false;
  for (const std::string& n : guessed.notes) said |= n.find("assumed: Swin V2's window") == 0;
  EXPECT_TRUE(said);
  expect_two_sizes_and_round_trip(m, io, golden, path);  // our format keeps swin_v2
}

// torchvision's names for our Swin: features.0.{0,2} the patch embedding, features.(2s+1).j the
// blocks of stage s (mlp.0 / mlp.3), features.2s the merging before stage s, head.
std::vector<std::pair<std::string, Shape>> torchvision_swin_names(const std::string& name,
                                                                  const Shape& s) {
  auto starts = [&](const std::string& head) { return name.compare(0, head.size(), head) == 0; };
  if (starts("patch_embed.proj.")) return {{"features.0.0." + name.substr(17), s}};
  if (starts("patch_embed.norm.")) return {{"features.0.2." + name.substr(17), s}};
  if (starts("head.fc.")) return {{"head." + name.substr(8), s}};
  if (!starts("layers.")) return {{name, s}};
  const size_t dot = name.find('.', 7);
  const int stage = std::stoi(name.substr(7, dot - 7));
  std::string rest = name.substr(dot + 1);
  if (rest.compare(0, 11, "downsample.") == 0) {
    return {{"features." + std::to_string(2 * stage) + "." + rest.substr(11), s}};
  }
  rest = rest.substr(7);  // "blocks."
  for (const auto& [from, to] : {std::pair{".mlp.fc1.", ".mlp.0."}, {".mlp.fc2.", ".mlp.3."}}) {
    const size_t at = rest.find(from);
    if (at != std::string::npos) rest = rest.substr(0, at) + to + rest.substr(at + 9);
  }
  return {{"features." + std::to_string(2 * stage + 1) + "." + rest, s}};
}

// torchvision's swin_v2_* structure: the same model under torchvision's names, with a stored key
// bias that torchvision zeroes in its forward (and the loader on load).
TEST(Zoo, SwinV2Torchvision) {
  const std::string golden = "swinv2_tv_synth_io.safetensors";
  SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
  const std::string path = write_timm_file(small_swinv2(), io.metadata().at("state_dict_fnv1a64"),
                                           golden, torchvision_swin_names);
  LoadOptions o;
  o.window = 4;
  LoadedModel m = load_model(path, o);
  EXPECT_EQ(m.format, "torchvision Swin");
  EXPECT_TRUE(m.model->config().swin().v2);
  expect_two_sizes_and_round_trip(m, io, golden, path);
}

TEST(Zoo, Deit3PresetsHaveTimmsShapes) {
  for (const char* name :
       {"deit3_small_patch16_224", "deit3_base_patch16_384", "deit3_huge_patch14_224"}) {
    const ModelConfig c = preset(name);
    EXPECT_TRUE(c.vit().no_embed_class) << name;
    EXPECT_DOUBLE_EQ(c.vit().layer_scale, 1e-6) << name;
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
  EXPECT_DOUBLE_EQ(preset("deit3_small_patch16_224").preprocess.crop_pct, 0.9);
  EXPECT_DOUBLE_EQ(preset("deit3_small_patch16_384").preprocess.crop_pct, 1.0);
  EXPECT_EQ(preset("deit3_small_patch16_384").img_rows, 384);
}

// Parameter counts of timm 1.0.31's models of the same names (sum of p.numel()): one preset of
// each structure (the larger sizes differ only in widths and depths; building them all would
// take minutes under the sanitizers).
TEST(Zoo, PresetParameterCountsAreTimms) {
  const std::pair<const char*, int64_t> want[] = {
      {"vit_tiny_patch16_384", 5790376},
      {"vit_small_patch32_224", 22878952},
      {"deit_tiny_patch16_224", 5717416},
      {"deit_small_distilled_patch16_224", 22436432},
      {"deit3_small_patch16_224", 22059496},
      {"vit_medium_patch16_reg4_gap_256", 38881768},
      {"swin_small_patch4_window7_224", 49606258},
      {"vit_small_patch16_rope_224", 21984232},
      {"vit_small_patch16_rope_mixed_ape_224", 22064104},
      {"vit_small_patch16_dinov3", 21586944},
  };
  for (const auto& [name, count] : want) {
    EXPECT_EQ(make_model(preset(name), 0)->num_params(), count) << name;
  }
  // q and v biases without a k bias (timm's EvaAttention, as BEiT) are one qkv bias here: its k
  // third, zero in every timm file, is a parameter too (D per block).
  EXPECT_EQ(make_model(preset("vit_medium_patch16_rope_reg1_gap_256"), 0)->num_params(),
            38743016 + 12 * 512);
  EXPECT_EQ(make_model(preset("eva02_small_patch14_336"), 0)->num_params(), 22129000 + 12 * 384);
  EXPECT_EQ(make_model(preset("vit_base_patch16_dinov3_qkvb"), 0)->num_params(),
            85659648 + 12 * 768);
  EXPECT_EQ(make_model(preset("eva02_base_patch14_448"), 0)->num_params(), 87117544 + 12 * 768);
  // The same for Swin V2 (2 x 96 + 2 x 192 + 6 x 384 + 2 x 768 k-bias values).
  EXPECT_EQ(make_model(preset("swinv2_tiny_window8_256"), 0)->num_params(), 28347154 + 4416);
}

// ---- image encoders: DINOv2, CLIP, SigLIP (tests/golden/make_encoder_goldens.py) --------------

// The loaded model's features against timm's at 32x32 and 48x32: forward_features' tokens, the
// pooled pre-logits (forward_head(pre_logits=True)) and the output, all from one pass.
void expect_features(Model& m, SafeTensorsFile& io, const std::string& golden) {
  for (const auto& [suffix, input, shape] :
       {std::tuple{"", "input", Shape{2, 3, 32, 32}},
        std::tuple{"_48x32", "input_48x32", Shape{1, 3, 48, 32}}}) {
    const std::string what = golden + std::string(suffix);
    const Model::Features f = m.forward_features(testing::synthetic_tensor(input, shape));
    ASSERT_NE(f.tokens, nullptr);
    ASSERT_NE(f.pooled, nullptr);
    ASSERT_NE(f.logits, nullptr);
    const Tensor tokens = io.get(std::string("tokens") + suffix);
    const Tensor pooled = io.get(std::string("pre_logits") + suffix);
    const Tensor logits = io.get(std::string("logits") + suffix);
    ASSERT_EQ(f.tokens->shape(), tokens.shape()) << what;
    EXPECT_LT(testing::max_rel_error(*f.tokens, tokens), 1e-4) << what << " tokens";
    ASSERT_EQ(f.pooled->shape(), pooled.shape()) << what;
    EXPECT_LT(testing::max_rel_error(*f.pooled, pooled), 1e-4) << what << " pre-logits";
    ASSERT_EQ(f.logits->shape(), logits.shape()) << what;
    EXPECT_LT(testing::max_rel_error(*f.logits, logits), 1e-4) << what << " logits";
    EXPECT_EQ(f.prefix, m.config().prefix_tokens()) << what;
    EXPECT_EQ(f.grid.rows * f.grid.cols + f.prefix, tokens.size(1)) << what;
  }
}

// A family on the ViT architecture read from timm's file with the user's flags `o`: the config
// read off the tensors (`check`), the features and outputs at two sizes, and the round trip
// through our format.
void check_encoder(const std::string& golden, const ModelConfig& c, const LoadOptions& o,
                   const std::function<void(const ModelConfig&)>& check) {
  SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
  const std::string path = write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), golden);
  LoadedModel m = load_model(path, o);
  EXPECT_EQ(m.format, "timm ViT") << golden;
  check(m.model->config());
  expect_features(*m.model, io, golden);
  expect_two_sizes_and_round_trip(m, io, golden, path);
}

LoadOptions heads_of(const ModelConfig& c) {
  LoadOptions o;
  o.heads = c.vit().heads;
  return o;
}

// DINOv2: layer scale 1e-5, class token, no head (the output is the class token's features).
TEST(Encoders, Dinov2FeaturesMatchTimm) {
  ModelConfig c = small_vit();
  c.classes = 0;
  c.vit().layer_scale = 1e-5;
  check_encoder("dinov2_synth_io.safetensors", c, heads_of(c), [](const ModelConfig& got) {
    EXPECT_EQ(got.classes, 0);
    EXPECT_GT(got.vit().layer_scale, 0);
    EXPECT_EQ(got.vit().pool, Pool::cls);
  });
}

// DINOv2 with registers and the giant's packed SwiGLU (fc1 makes both halves, the first gated).
TEST(Encoders, Dinov2RegistersAndPackedSwigluMatchTimm) {
  ModelConfig c = small_vit();
  c.classes = 0;
  VitArch& a = c.vit();
  a.layer_scale = 1e-5;
  a.reg_tokens = 4;
  a.no_embed_class = true;
  a.mlp = Mlp::swiglu;
  a.mlp_dim = 128;
  check_encoder("dinov2_reg_synth_io.safetensors", c, heads_of(c), [](const ModelConfig& got) {
    EXPECT_EQ(got.vit().reg_tokens, 4);
    EXPECT_EQ(got.vit().mlp, Mlp::swiglu);
    EXPECT_EQ(got.vit().mlp_dim, 128);
  });
}

// A CLIP tower (OpenAI's activation): norm_pre, eps 1e-5, quick_gelu, a projection head. The
// file cannot tell the activation: refused without --mlp, naming it.
TEST(Encoders, ClipQuickGeluTowerMatchesTimmAndNeedsItsActivationNamed) {
  ModelConfig c = small_vit();
  VitArch& a = c.vit();
  a.norm_pre = true;
  a.eps = 1e-5f;
  a.mlp = Mlp::quick_gelu;
  {
    SafeTensorsFile io = SafeTensorsFile::open(zoo("clip_quickgelu_synth_io.safetensors"));
    const std::string path =
        write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), "clip_refused.safetensors");
    try {
      load_model(path, heads_of(c));
      ADD_FAILURE() << "a CLIP tower's file loaded without its activation";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--mlp quick_gelu"), std::string::npos) << e.what();
    }
    fs::remove_all(fs::path(path).parent_path());
  }
  LoadOptions o = heads_of(c);
  o.mlp = "quick_gelu";
  check_encoder("clip_quickgelu_synth_io.safetensors", c, o, [](const ModelConfig& got) {
    EXPECT_TRUE(got.vit().norm_pre);
    EXPECT_FLOAT_EQ(got.vit().eps, 1e-5f);
    EXPECT_EQ(got.vit().mlp, Mlp::quick_gelu);
    EXPECT_EQ(got.classes, 10);
  });
}

// SigLIP: no class token, attention pooling ("map"), no head.
TEST(Encoders, SiglipAttentionPoolingMatchesTimm) {
  ModelConfig c = small_vit();
  c.classes = 0;
  c.vit().class_token = false;
  c.vit().pool = Pool::map;
  check_encoder("siglip_synth_io.safetensors", c, heads_of(c), [](const ModelConfig& got) {
    EXPECT_EQ(got.vit().pool, Pool::map);
    EXPECT_FALSE(got.vit().class_token);
    EXPECT_EQ(got.classes, 0);
  });
}

// SigLIP's gap variant: the mean of the normalised tokens; and a ViT without qkv bias.
TEST(Encoders, SiglipGapMeanOfNormalisedTokensWithoutQkvBiasMatchesTimm) {
  ModelConfig c = small_vit();
  c.classes = 0;
  VitArch& a = c.vit();
  a.class_token = false;
  a.pool = Pool::avg;
  a.norm_before_pool = true;
  a.qkv_bias = false;
  check_encoder("siglip_gap_synth_io.safetensors", c, heads_of(c), [](const ModelConfig& got) {
    EXPECT_EQ(got.vit().pool, Pool::avg);
    EXPECT_TRUE(got.vit().norm_before_pool);
    EXPECT_FALSE(got.vit().qkv_bias);
  });
}

// DINOv3 (timm's Eva with rope_type 'dinov3'): a class token, 4 register tokens, layer scale
// gamma_1/gamma_2, no position tensors; read off the tensors as DINOv3 (rope-dinov3, eps 1e-5,
// the normalised patch tokens mean-pooled) once its heads are given, and equal to timm's tokens,
// pre-logits and outputs at 32x32 and at two non-square sizes (the RoPE normalised on each grid).
// Without the heads the file is refused naming --heads; a config.json naming a DINOv3 size
// without a preset is refused.
TEST(Encoders, Dinov3FeaturesMatchTimmAtNonSquareSizes) {
  for (const bool qkvb : {false, true}) {
    const std::string golden =
        qkvb ? "dinov3_qkvb_synth_io.safetensors" : "dinov3_synth_io.safetensors";
    ModelConfig c = small_vit();
    c.classes = qkvb ? 10 : 0;
    c.encoding = "rope-dinov3";
    VitArch& a = c.vit();
    a.reg_tokens = 4;
    a.layer_scale = 1e-5;
    a.qkv_bias = qkvb;
    SafeTensorsFile io = SafeTensorsFile::open(zoo(golden));
    const std::string path =
        write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), golden, beit_names);
    const std::string m = testing::message_of([&] { load_model(path); });
    EXPECT_NE(m.find("--heads N"), std::string::npos) << m;
    LoadedModel lm = load_model(path, heads_of(c));
    EXPECT_EQ(lm.format, "timm ViT") << golden;
    const ModelConfig& got = lm.model->config();
    EXPECT_EQ(got.family, "dinov3");
    EXPECT_EQ(got.encoding.str(), "rope-dinov3");
    EXPECT_EQ(got.vit().eps, 1e-5f);
    EXPECT_EQ(got.vit().pool, Pool::avg);
    EXPECT_TRUE(got.vit().norm_before_pool);
    EXPECT_EQ(got.vit().qkv_bias, qkvb);
    EXPECT_EQ(got.vit().reg_tokens, 4);
    EXPECT_EQ(got.classes, c.classes);
    for (const auto& [suffix, input, shape] :
         {std::tuple{"", "input", Shape{2, 3, 32, 32}},
          std::tuple{"_48x32", "input_48x32", Shape{1, 3, 48, 32}},
          std::tuple{"_32x48", "input_32x48", Shape{1, 3, 32, 48}}}) {
      const std::string what = golden + suffix;
      const Model::Features f = lm.model->forward_features(testing::synthetic_tensor(input, shape));
      ASSERT_NE(f.tokens, nullptr);
      ASSERT_NE(f.pooled, nullptr);
      ASSERT_NE(f.logits, nullptr);
      for (const auto& [name, t] :
           {std::pair{"tokens", f.tokens}, std::pair{"pre_logits", f.pooled},
            std::pair{"logits", f.logits}}) {
        const Tensor want = io.get(name + std::string(suffix));
        ASSERT_EQ(t->shape(), want.shape()) << what << " " << name;
        EXPECT_LT(testing::max_rel_error(*t, want), 1e-4) << what << " " << name;
      }
      EXPECT_EQ(f.prefix, 5) << what;
    }
    expect_two_sizes_and_round_trip(lm, io, golden, path);
  }
  const fs::path dir = fs::temp_directory_path() / ("vitpe_dinov3_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ModelConfig c = small_vit();
  c.classes = 0;
  c.vit().reg_tokens = 4;
  c.vit().layer_scale = 1e-5;
  c.vit().qkv_bias = false;
  std::vector<std::pair<std::string, Tensor>> tensors;
  const auto model = make_model(c, 0);
  for (Param* p : model->params()) {
    for (const auto& [name, shape] : beit_names(p->name, p->value.shape())) {
      tensors.emplace_back(name, testing::synthetic_tensor(name, shape));
    }
  }
  const std::string path = (dir / "model.safetensors").string();
  save_safetensors(path, tensors);
  std::ofstream(dir / "config.json")
      << R"({"architecture": "vit_huge_plus_patch16_dinov3", "pretrained_cfg": {}})";
  const std::string m = testing::message_of([&] { load_model(path, heads_of(c)); });
  EXPECT_NE(m.find("'vit_huge_plus_patch16_dinov3': a DINOv3 model vitpe has no preset for"),
            std::string::npos)
      << m;
  fs::remove_all(dir);
}

// At the families' own patch and resolutions: DINOv2 (patch 14) at its native 518 and at 224
// (pos_embed 37 x 37 resampled to 16 x 16 as timm does), SigLIP (patch 16) at 224 and 384.
TEST(Encoders, Dinov2At518And224AndSiglipAt224And384MatchTimm) {
  struct Case {
    const char* golden;
    int64_t patch, native, other;
    std::function<void(ModelConfig&)> set;
  };
  const Case cases[] = {
      {"dinov2_p14_synth_io.safetensors", 14, 518, 224,
       [](ModelConfig& c) { c.vit().layer_scale = 1e-5; }},
      {"siglip_p16_synth_io.safetensors", 16, 224, 384,
       [](ModelConfig& c) {
         c.vit().class_token = false;
         c.vit().pool = Pool::map;
       }},
  };
  for (const Case& k : cases) {
    ModelConfig c = small_vit();
    c.patch = k.patch;
    c.img_rows = c.img_cols = k.native;
    c.classes = 0;
    k.set(c);
    SafeTensorsFile io = SafeTensorsFile::open(zoo(k.golden));
    const std::string path = write_timm_file(c, io.metadata().at("state_dict_fnv1a64"), k.golden);
    LoadedModel m = load_model(path, heads_of(c));
    EXPECT_EQ(m.model->config().img_rows, k.native) << k.golden;  // from pos_embed's grid
    for (const int64_t size : {k.native, k.other}) {
      const std::string at = std::to_string(size);
      const Model::Features f =
          m.model->forward_features(testing::synthetic_tensor("input_" + at, {1, 3, size, size}));
      EXPECT_LT(testing::max_rel_error(*f.pooled, io.get("pre_logits_" + at)), 1e-4)
          << k.golden << " at " << at;
      EXPECT_LT(testing::max_rel_error(*f.logits, io.get("logits_" + at)), 1e-4)
          << k.golden << " at " << at;
    }
    fs::remove_all(fs::path(path).parent_path());
  }
}

// The encoder presets: timm 1.0.31's parameter counts, and no head where timm's default weights
// have none.
TEST(Encoders, PresetsHaveTimmsParameterCounts) {
  const std::pair<const char*, int64_t> want[] = {
      {"vit_small_patch14_dinov2", 22056192},
      {"vit_small_patch14_reg4_dinov2", 22057344},
      {"vit_base_patch32_clip_quickgelu_224", 87849728},
      {"vit_base_patch16_siglip_224", 92884224},
      {"vit_base_patch16_siglip_gap_224", 85797120},
  };
  for (const auto& [name, count] : want) {
    EXPECT_EQ(make_model(preset(name), 0)->num_params(), count) << name;
  }
  EXPECT_EQ(preset("vit_small_patch14_dinov2").classes, 0);
  EXPECT_EQ(preset("vit_small_patch14_dinov2").img_rows, 518);
  EXPECT_EQ(preset("vit_base_patch16_siglip_384").classes, 0);
  EXPECT_EQ(preset("vit_base_patch16_clip_quickgelu_224").classes, 512);
  EXPECT_EQ(preset("vit_base_patch16_clip_224").vit().mlp, Mlp::gelu);
  EXPECT_EQ(family_of(preset("vit_small_patch14_dinov2")).name, "dinov2");
}

}  // namespace
}  // namespace vitpe
