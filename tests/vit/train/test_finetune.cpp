// Tests of the fine-tuning recipes of vit/train/train.cpp (make_optimizer, the backward scope of
// the models): layer-wise learning-rate decay against timm's grouping of the parameter names, the
// head's own rate, frozen layers that stay bitwise and run no backward, a shortened backward that
// gives the full one's gradients, and the refusals (bad recipes, a resume with another).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>

#include "ops/ops.h"
#include "ops/random.h"
#include "tests/testing.h"
#include "vit/train/train.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

fs::path finetune_temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("vitpe_test_finetune_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// A 2-block ViT on the procedural relation canvases at 16x16 (4x4 patches of 4 px): 8 steps an
// epoch.
TrainOptions finetune_options() {
  TrainOptions o;
  o.model = "vit-fmnist";
  o.encoding = "learned1d";
  o.overrides = {"depth=2", "dim=32", "heads=2", "mlp_dim=64"};
  o.data.name = "procedural";
  o.data.rows = o.data.cols = 16;
  o.data.limit = 256;
  o.test_limit = 32;
  o.epochs = 1;
  o.batch = 32;
  o.lr = 2e-3;
  o.warmup_epochs = 0.5;
  o.progress = false;
  o.verbose = false;
  return o;
}

ModelConfig small_vit(int64_t depth, const std::string& encoding) {
  ModelConfig c = apply_overrides(
      preset("vit-fmnist"), {"depth=" + std::to_string(depth), "dim=32", "heads=2", "mlp_dim=64"});
  c.img_rows = c.img_cols = 16;
  c.encoding = encoding;
  return c;
}

// Swin with stages of 2 and 2 blocks on a 16x16 image (8x8 then 4x4 tokens, windows of 4).
ModelConfig small_swin() {
  ModelConfig c = apply_overrides(preset("swin-fmnist"), {"dim=16", "window=4"});
  c.img_rows = c.img_cols = 16;
  return c;
}

// A parameter's layer read from its name alone, as timm's group matchers give it (ViT:
// ^cls_token|reg_token|pos_embed|patch_embed -> 0, ^blocks.(\d+) -> i + 1; Swin: ^patch_embed
// -> 0, ^layers.(\d+).downsample -> the stage's first block, ^layers.(\d+).blocks.(\d+) -> the
// blocks counted across the stages), the final norm and head the top layer (BEiT's rule).
// The whole number at the start of `s` from `at` (digits only; -1 when there are none), and where
// it ends. (Plain parsing: g++ 12's std::regex trips -Wmaybe-uninitialized under the sanitizers.)
int64_t number_at(const std::string& s, size_t at, size_t& end) {
  end = at;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  return end == at ? -1 : std::stoll(s.substr(at, end - at));
}

bool begins(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

int64_t layer_from_name(const std::string& name, const std::vector<int64_t>& stage_depths) {
  int64_t depth = 0;
  for (int64_t d : stage_depths) depth += d;
  size_t end = 0;
  if (begins(name, "blocks.")) {
    const int64_t i = number_at(name, 7, end);
    if (i >= 0 && end < name.size() && name[end] == '.') return i + 1;
  }
  if (begins(name, "layers.")) {
    const int64_t stage = number_at(name, 7, end);
    if (stage >= 0 && stage < static_cast<int64_t>(stage_depths.size())) {
      int64_t before = 0;
      for (int64_t s = 0; s < stage; ++s) before += stage_depths[s];
      const std::string rest = name.substr(end);
      if (begins(rest, ".downsample")) return before + 1;
      if (begins(rest, ".blocks.")) {
        const int64_t j = number_at(rest, 8, end);
        if (j >= 0) return before + j + 1;
      }
    }
  }
  for (const char* first : {"cls_token", "reg_token", "pos_embed", "patch_embed"}) {
    if (begins(name, first)) return 0;
  }
  for (const char* top : {"norm", "fc_norm", "head"}) {
    if (begins(name, top)) return depth + 1;
  }
  ADD_FAILURE() << "no layer for " << name;
  return -1;
}

// Every gradient 1 and one step without weight decay: AdamW's first step moves each parameter by
// lr x its scale (m / sqrt(v) = 1 up to eps), so the step shows the rate it used.
void expect_first_step_moves_by_scale(AdamW& opt, float lr) {
  std::vector<Tensor> before;
  for (Param* p : opt.params()) {
    before.push_back(p->value.clone());
    p->grad = Tensor::full(p->value.shape(), 1.0f);
  }
  opt.step(lr);
  for (size_t i = 0; i < opt.params().size(); ++i) {
    const Param& p = *opt.params()[i];
    const double moved = before[i].f32()[0] - p.value.f32()[0];
    EXPECT_NEAR(moved, lr * opt.lr_scales()[i], 1e-3 * lr * opt.lr_scales()[i]) << p.name;
  }
}

TEST(FineTune, LayerDecayScalesEachLayerAsTimmGroupsIt) {
  TrainOptions o;
  o.layer_decay = 0.5;
  o.weight_decay = 0;
  struct Case {
    ModelConfig config;
    std::vector<int64_t> stages;
  };
  for (const Case& c : {Case{small_vit(3, "learned1d"), {3}}, Case{small_swin(), {2, 2}}}) {
    auto model = make_model(c.config, 1);
    AdamW opt = make_optimizer(*model, o);
    ASSERT_EQ(opt.params().size(), model->params().size()) << "nothing frozen";
    const int64_t depth = model->blocks();
    EXPECT_EQ(depth, c.stages.size() == 1 ? 3 : 4);
    std::map<int64_t, int> per_layer;
    for (size_t i = 0; i < opt.params().size(); ++i) {
      const std::string& name = opt.params()[i]->name;
      const int64_t layer = layer_from_name(name, c.stages);
      ++per_layer[layer];
      EXPECT_EQ(opt.lr_scales()[i], static_cast<float>(std::pow(0.5, depth + 1 - layer))) << name;
    }
    // Every layer from the embeddings to the head holds parameters.
    EXPECT_EQ(per_layer.size(), static_cast<size_t>(depth + 2));
    expect_first_step_moves_by_scale(opt, 1e-2f);
  }
}

TEST(FineTune, HeadLrIsTheHeadsOwnRateAndNotDecayed) {
  TrainOptions o;
  o.lr = 1e-3;
  o.head_lr = 4e-3;
  o.layer_decay = 0.5;
  o.weight_decay = 0;
  auto model = make_model(small_vit(2, "none"), 1);
  AdamW opt = make_optimizer(*model, o);
  for (size_t i = 0; i < opt.params().size(); ++i) {
    const std::string& name = opt.params()[i]->name;
    const float want = name.rfind("head.", 0) == 0
                           ? 4.0f
                           : static_cast<float>(std::pow(0.5, 3 - layer_from_name(name, {2})));
    EXPECT_EQ(opt.lr_scales()[i], want) << name;
  }
  expect_first_step_moves_by_scale(opt, 1e-3f);
}

// Nothing was ever written into p's gradient: undefined, or the zeros it was made with (an
// encoding makes its parameters' gradients with them).
bool no_gradient(const Param& p) {
  if (!p.grad.defined()) return true;
  const float* g = p.grad.f32();
  return std::all_of(g, g + p.grad.numel(), [](float v) { return v == 0.0f; });
}

// Two models of the same seed and the same pass: one with the whole backward, one under `scope`.
// The scoped one computes exactly the whole one's gradients for its trainable parameters and
// none for the frozen ones.
void expect_scoped_gradients(const ModelConfig& c, Model::BackwardScope scope) {
  auto whole = make_model(c, 5);
  auto scoped = make_model(c, 5);
  scoped->set_backward_scope(scope);
  Rng rng(9);
  Tensor images = Tensor::empty({2, c.channels, c.img_rows, c.img_cols});
  rng.fill_normal(images, 1.0);
  Tensor dlogits = Tensor::empty({2, c.classes});
  rng.fill_normal(dlogits, 1.0);
  for (Model* m : {whole.get(), scoped.get()}) {
    m->zero_grad();
    m->forward(images, true);
    m->backward(dlogits);
  }
  const std::vector<Param*> a = whole->params(), b = scoped->params();
  const std::vector<int64_t> layers = scoped->param_layers();
  std::vector<Param*> head = scoped->head_params();
  size_t trained = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const bool in_head = std::find(head.begin(), head.end(), b[i]) != head.end();
    const bool trainable = scope.head_only ? in_head : layers[i] >= scope.from_layer;
    if (!trainable) {
      EXPECT_TRUE(no_gradient(*b[i])) << b[i]->name << " is frozen";
      continue;
    }
    ++trained;
    ASSERT_TRUE(b[i]->grad.defined()) << b[i]->name;
    EXPECT_EQ(std::memcmp(a[i]->grad.f32(), b[i]->grad.f32(), a[i]->grad.numel() * sizeof(float)),
              0)
        << b[i]->name << " (from layer " << scope.from_layer << ")";
  }
  EXPECT_EQ(trained, scoped->trainable_params().size());
}

TEST(FineTune, AShortenedBackwardGivesTheWholeBackwardsGradients) {
  // ViT with a conditional encoding after block 1 (layer 1) and a bias table in every block.
  const ModelConfig vit = small_vit(3, "peg+relbias");
  for (int64_t from : {1, 2, 4}) expect_scoped_gradients(vit, {from, false});
  expect_scoped_gradients(vit, {0, true});
  const ModelConfig swin = small_swin();
  for (int64_t from : {1, 3, 4, 5}) expect_scoped_gradients(swin, {from, false});
  expect_scoped_gradients(swin, {0, true});
}

std::map<std::string, Tensor> values_of(Model& m) {
  std::map<std::string, Tensor> out;
  for (Param* p : m.params()) out[p->name] = p->value.clone();
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)) == 0;
}

TEST(FineTune, FrozenLayersStayBitwiseAndGetNoGradient) {
  for (const std::string freeze : {"1", "head"}) {
    TrainOptions o = finetune_options();
    o.freeze = freeze;
    TrainResult r = train(o);
    const auto start = values_of(*make_model(r.config, o.seed));  // what train() started from
    for (Param* p : r.model->params()) {
      auto starts = [&](const char* prefix) { return p->name.rfind(prefix, 0) == 0; };
      // --freeze 1 of 2 blocks: block 1, the final norm and the head train.
      const bool trainable = freeze == "head" ? starts("head.")
                                              : starts("blocks.1.") || starts("norm.") ||
                                                    starts("fc_norm.") || starts("head.");
      if (trainable) {
        EXPECT_TRUE(p->grad.defined()) << p->name;
        if (p->name.find("weight") != std::string::npos) {
          EXPECT_FALSE(same_bits(p->value, start.at(p->name))) << p->name << " was trained";
        }
      } else {
        EXPECT_TRUE(same_bits(p->value, start.at(p->name))) << p->name << " is frozen";
        EXPECT_TRUE(no_gradient(*p)) << p->name << ": no gradient computed";
      }
    }
  }
}

// A recipe to try: the three settings, the message expected.
struct RecipeCase {
  std::string freeze;
  double layer_decay, head_lr;
  std::string message;
};

void set_recipe(TrainOptions& o, const RecipeCase& c) {
  o.freeze = c.freeze;
  o.layer_decay = c.layer_decay;
  o.head_lr = c.head_lr;
}

TEST(FineTune, BadRecipesAreRefusedBeforeAnyFileIsWritten) {
  const fs::path dir = finetune_temp_dir("bad");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<RecipeCase> cases = {
      {"3", 1, 0, "(2 blocks): expected 0..2 or 'head'"},
      {"tail", 1, 0, "--freeze 'tail': expected 'head'"},
      {"-1", 1, 0, "--freeze '-1': expected 'head'"},
      {"", 0, 0, "--layer-decay must be in (0, 1]"},
      {"", 1.25, 0, "--layer-decay must be in (0, 1]"},
      {"", nan, 0, "--layer-decay must be in (0, 1]"},
      {"", 1, -1e-3, "--head-lr must be >= 0"},
  };
  for (const RecipeCase& c : cases) {
    TrainOptions o = finetune_options();
    o.out = (dir / "run").string();
    set_recipe(o, c);
    const std::string m = testing::message_of([&] { train(o); });
    EXPECT_NE(m.find(c.message), std::string::npos) << m;
    EXPECT_FALSE(fs::exists(dir)) << m;
  }
}

TEST(FineTune, ResumeWithAnotherRecipeIsRefusedNamingIt) {
  const fs::path dir = finetune_temp_dir("resume");
  TrainOptions o = finetune_options();
  o.epochs = 2;
  o.stop_after_epochs = 1;
  o.layer_decay = 0.75;
  o.out = dir.string();
  train(o);
  o.resume = true;
  const std::vector<RecipeCase> cases = {
      {"", 0.5, 0, "layer_decay (run: 0.75, now: 0.5)"},
      {"", 1, 0, "layer_decay (run: 0.75, now: -)"},
      {"1", 0.75, 0, "freeze (run: -, now: \"1\")"},
      {"", 0.75, 1e-2, "head_lr (run: -, now: 0.01)"},
  };
  for (const RecipeCase& c : cases) {
    TrainOptions t = o;
    set_recipe(t, c);
    const std::string m = testing::message_of([&] { train(t); });
    EXPECT_NE(m.find("--resume with different settings"), std::string::npos) << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << m;
  }
  const TrainResult r = train(o);  // the same recipe continues
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.history.size(), 2u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vitpe
