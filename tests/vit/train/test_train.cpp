// Tests of vit/train/train.cpp: a tiny model learns, a resumed run equals an uninterrupted one
// bitwise, the run directory's files, config overrides and the progress line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "ops/ops.h"
#include "ops/util.h"
#include "tests/testing.h"
#include "tests/vit/models/every_encoding.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"
#include "vit/train/run_dir.h"
#include "vit/train/train.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

fs::path train_temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("vitpe_test_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// A small ViT on the procedural relation dataset at a 16x16 canvas (4x4 patches of 4 px).
TrainOptions tiny_options() {
  TrainOptions o;
  o.model = "vit-fmnist";
  o.encoding = "sincos2d";
  o.overrides = {"depth=1", "dim=32", "heads=2", "mlp_dim=64"};
  o.data.name = "procedural";
  o.data.rows = o.data.cols = 16;
  o.data.limit = 256;
  o.test_limit = 64;
  o.epochs = 3;
  o.batch = 32;
  o.lr = 2e-3;
  o.warmup_epochs = 0.5;
  o.progress = false;
  o.verbose = false;
  o.log_every = 4;
  return o;
}

TEST(Train, TinyModelLearnsASmallSubset) {
  // Fashion-MNIST (installed by scripts/setup): 10 classes, chance 10%.
  if (!fs::exists(default_fashion_mnist_dir() + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << default_fashion_mnist_dir()
                 << " (Debian package dataset-fashion-mnist)";
  }
  // Patches of 7 px (a 4x4 grid) keep it fast; no augmentation so 160 steps suffice.
  TrainOptions o = tiny_options();
  o.data = DatasetOptions{};
  o.data.limit = 1600;
  o.test_limit = 300;
  o.overrides = {"patch=7", "depth=2", "dim=48", "heads=4", "mlp_dim=96"};
  o.epochs = 4;
  o.batch = 40;
  o.lr = 1e-3;
  o.warmup_epochs = 0.3;
  o.augment = false;
  TrainResult r = train(o);
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.history.size(), 4u);
  EXPECT_LT(r.history.back().train_loss, 0.8 * r.history.front().train_loss);
  EXPECT_GT(r.history.back().test_acc, 0.45) << "chance is 10%";
}

TEST(Train, ResumeEqualsUninterruptedBitwise) {
  const fs::path a = train_temp_dir("full"), b = train_temp_dir("resumed");
  TrainOptions o = tiny_options();
  o.out = a.string();
  TrainResult full = train(o);
  ASSERT_TRUE(full.finished);

  o.out = b.string();
  o.stop_after_epochs = 1;
  TrainResult part = train(o);  // "killed" after epoch 1
  EXPECT_FALSE(part.finished);
  o.resume = true;
  part = train(o);  // epoch 2, stops again
  EXPECT_FALSE(part.finished);
  TrainResult resumed = train(o);  // epoch 3
  ASSERT_TRUE(resumed.finished);

  auto pa = full.model->params(), pb = resumed.model->params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i]->name, pb[i]->name);
    ASSERT_EQ(0, std::memcmp(pa[i]->value.f32(), pb[i]->value.f32(), pa[i]->value.nbytes()))
        << pa[i]->name << " differs";
  }
  ASSERT_EQ(full.history.size(), resumed.history.size());
  for (size_t e = 0; e < full.history.size(); ++e) {
    EXPECT_EQ(full.history[e].train_loss, resumed.history[e].train_loss);
    EXPECT_EQ(full.history[e].test_acc, resumed.history[e].test_acc);
    EXPECT_EQ(full.history[e].step, resumed.history[e].step);
  }
  // The saved files agree too, and the metric lines are the same apart from times.
  SafeTensorsFile fa = SafeTensorsFile::open((a / "model.safetensors").string());
  SafeTensorsFile fb = SafeTensorsFile::open((b / "model.safetensors").string());
  for (const std::string& n : fa.names()) {
    auto ra = fa.raw(n), rb = fb.raw(n);
    ASSERT_EQ(ra.size(), rb.size());
    ASSERT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size())) << n;
  }
  auto lines = [](const fs::path& p) {
    std::vector<nlohmann::json> v;
    std::ifstream f(p);
    std::string l;
    while (std::getline(f, l)) {
      auto j = nlohmann::json::parse(l);
      j.erase("seconds");
      j.erase("img_per_s");
      v.push_back(j);
    }
    return v;
  };
  auto la = lines(a / "metrics.jsonl"), lb = lines(b / "metrics.jsonl");
  EXPECT_EQ(la.size(), 3u + 3u * 8u / 4u);  // 3 epoch lines + a step line every 4 of 24 steps
  EXPECT_EQ(la, lb);

  // Resuming with other settings is refused, naming the difference.
  o.lr = 1e-2;
  try {
    train(o);
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("lr"), std::string::npos) << e.what();
  }
  // So is resuming with adaptive threads, whose steps may run on another count than the run's.
  o.lr = tiny_options().lr;
  o.adaptive_threads = true;
  try {
    train(o);
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("adaptive_threads"), std::string::npos) << e.what();
  }
  // best.safetensors loads as a model with the run's config.
  LoadedModel lm = load_model((a / "best.safetensors").string());
  EXPECT_EQ(lm.model->config().encoding, "sincos2d");
  EXPECT_EQ(lm.model->config().img_rows, 16);
  fs::remove_all(a);
  fs::remove_all(b);
}

// rope-dinov3's coordinate augmentation in training: the draws are a pure function of the seed
// and the step (two runs agree bitwise), they change the training (the weights differ from a
// run without them), and no part keeps a seed after training (evaluation sees plain tables).
TEST(Train, CoordinateAugmentationIsRepeatableAndLeftOutOfEvaluation) {
  TrainOptions o = tiny_options();
  o.epochs = 1;
  o.encoding = "rope-dinov3:shift=0.2,rescale=2";
  const TrainResult a = train(o), b = train(o);
  o.encoding = "rope-dinov3";
  const TrainResult plain = train(o);
  auto pa = a.model->params(), pb = b.model->params(), pp = plain.model->params();
  ASSERT_EQ(pa.size(), pp.size());
  double moved = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(pa[i]->value.f32(), pb[i]->value.f32(), pa[i]->value.nbytes()))
        << pa[i]->name;
    moved = std::max(moved, testing::max_abs_diff(pa[i]->value, pp[i]->value));
  }
  EXPECT_GT(moved, 1e-6);
  EXPECT_EQ(a.history.back().test_acc, b.history.back().test_acc);
  for (AttentionEncoding* part : a.model->encoding_parts().attention) {
    EXPECT_TRUE(part->augments());
    EXPECT_FALSE(part->augmentation().has_value());
  }
}

// A study's numbers do not depend on how many threads ran it: two steps (AdamW, clipping,
// augmentation) and the evaluation of the quick study's ViT at D 64 and at D 128, with every
// encoding of the registry, and of the Swin preset with every windowed encoding, give the same
// bits of every parameter, loss and accuracy on 1, 2 and 3 threads. (On AVX2, where oneDNN's own
// split of the linears depended on the count at D 64, ctest's fixed_split_avx2 runs it again.)
TEST(Train, SameBitsOnAnyThreadCount) {
  const int before = num_threads();
  struct Case {
    std::string model;
    std::vector<std::string> overrides;
    std::vector<std::string> specs;
    int64_t batch;
  };
  std::vector<Case> cases;
  for (int64_t dim : {64, 128}) {
    cases.push_back({"vit-fmnist",
                     {"patch=7", "depth=2", "dim=" + std::to_string(dim), "heads=4",
                      "mlp_dim=" + std::to_string(2 * dim)},
                     testing::every_encoding_spec(),
                     50});
  }
  // Swin's 14 x 14 tokens cost more: half the batch.
  cases.push_back({"swin-fmnist", {}, testing::every_encoding_spec(AttentionLayout::windowed), 25});
  for (const Case& c : cases) {
    for (const std::string& spec : c.specs) {
      TrainOptions o = tiny_options();
      o.model = c.model;
      o.encoding = spec;
      o.overrides = c.overrides;
      o.data.rows = o.data.cols = 28;
      o.data.limit = 2 * c.batch;
      o.test_limit = c.batch;
      o.batch = c.batch;
      o.epochs = 1;
      o.warmup_epochs = 0;
      o.eval_batch = 32;
      std::vector<TrainResult> runs;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        runs.push_back(train(o));
      }
      const std::string what = c.model + " " + join(c.overrides, " ") + " " + spec;
      for (size_t t = 1; t < runs.size(); ++t) {
        const auto pa = runs[0].model->params(), pb = runs[t].model->params();
        ASSERT_EQ(pa.size(), pb.size());
        for (size_t i = 0; i < pa.size(); ++i) {
          EXPECT_EQ(0, std::memcmp(pa[i]->value.f32(), pb[i]->value.f32(), pa[i]->value.nbytes()))
              << what << ": " << pa[i]->name << " on " << t + 1 << " threads";
        }
        EXPECT_EQ(runs[0].history[0].train_loss, runs[t].history[0].train_loss) << what;
        EXPECT_EQ(runs[0].history[0].test_loss, runs[t].history[0].test_loss) << what;
        EXPECT_EQ(runs[0].history[0].test_acc, runs[t].history[0].test_acc) << what;
      }
    }
  }
  set_num_threads(before);
}

// Adaptive threads: a run whose steps and evaluations time themselves (and probe 1 thread by the
// 4th step) finishes with finite losses, and the caller's thread count is what it was.
TEST(Train, AdaptiveThreadsTrainAndRestoreTheCount) {
  const int before = num_threads();
  set_num_threads(2);
  TrainOptions o = tiny_options();
  o.adaptive_threads = true;
  o.epochs = 2;
  TrainResult r = train(o);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(num_threads(), 2);
  EXPECT_TRUE(std::isfinite(r.history.back().train_loss));
  set_num_threads(before);
}

TEST(Train, EvaluateCountsEverySampleAndOverridesApply) {
  TrainOptions o = tiny_options();
  DatasetOptions d = o.data;
  d.train = false;
  d.limit = 70;  // not a multiple of the batch
  auto data = make_dataset(d);
  ModelConfig c = make_train_config(o, *data);
  EXPECT_EQ(c.vit().depth, 1);
  EXPECT_EQ(c.vit().dim, 32);
  EXPECT_EQ(c.classes, 4);
  EXPECT_EQ(c.channels, 1);
  auto model = make_model(c, 1);
  EvalResult r = evaluate(*model, *data, 32);
  EXPECT_EQ(r.count, 70);
  EXPECT_GE(r.accuracy, 0.0);
  EXPECT_LE(r.accuracy, 1.0);
  EXPECT_GT(r.loss, 0.0);
  EXPECT_THROW(apply_overrides(c, {"depht=2"}), std::invalid_argument);
  EXPECT_THROW(apply_overrides(c, {"depth"}), std::invalid_argument);
}

// --set takes every field a config has, of every family: each set to its own value leaves the
// config as it was, and the architecture's fields take new values (the MLP variant too, which
// files once left out at its default).
TEST(Train, OverridesAcceptEveryArchitectureField) {
  for (const char* name : {"vit-fmnist", "swin-fmnist"}) {
    const ModelConfig c = preset(name);
    const nlohmann::json j = nlohmann::json::parse(c.to_json());
    for (const auto& [key, value] : j.items()) {
      SCOPED_TRACE(std::string(name) + " " + key);
      EXPECT_EQ(apply_overrides(c, {key + "=" + value.dump()}), c);
    }
  }
  ModelConfig v =
      apply_overrides(preset("vit-fmnist"), {"mlp=swiglu", "mlp_norm=true", "layer_scale=1e-5",
                                             "reg_tokens=2", "depth=3", "heads=8", "mlp_dim=64"});
  EXPECT_EQ(v.vit().mlp, Mlp::swiglu);
  EXPECT_TRUE(v.vit().mlp_norm);
  EXPECT_EQ(v.vit().reg_tokens, 2);
  EXPECT_EQ(v.vit().depth, 3);
  EXPECT_EQ(v.vit().heads, 8);
  // The preset's label named the preset's architecture: the new one is described anew.
  EXPECT_EQ(v.family_label(), "EVA-02 (SwiGLU with norm)");
  ModelConfig s = apply_overrides(preset("swin-fmnist"),
                                  {"swin_v2=true", "window=4", "depths=[1,1]", "encoding=cpb"});
  EXPECT_TRUE(s.swin().v2);
  EXPECT_EQ(s.swin().window, 4);
  EXPECT_EQ(s.family_label(), "Swin V2");
  // A ViT field is not a Swin one.
  const std::string m =
      testing::message_of([] { apply_overrides(preset("swin-fmnist"), {"mlp=swiglu"}); });
  EXPECT_NE(m.find("unknown key 'mlp'"), std::string::npos) << m;
}

// A run directory cannot lie: a run already there is not silently replaced (--resume or --force
// say what to do with it), two writers cannot share one, and half-written files a killed writer
// left are removed on the next start.
TEST(Train, RunDirectoryRefusesOverwritesAndSecondWriters) {
  const fs::path dir = train_temp_dir("guarded");
  TrainOptions o = tiny_options();
  o.epochs = 1;
  o.out = dir.string();
  ASSERT_TRUE(train(o).finished);
  std::string m = testing::message_of([&] { train(o); });
  EXPECT_NE(m.find("already holds a run"), std::string::npos) << m;
  EXPECT_NE(m.find("--resume"), std::string::npos) << m;

  { std::ofstream(dir / "model.safetensors.tmp.99999") << "half a checkpoint"; }
  o.force = true;
  ASSERT_TRUE(train(o).finished);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.tmp.99999"));

  const int fd = ::open((dir / ".vitpe.lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // another writer holds the directory
  m = testing::message_of([&] { train(o); });
  EXPECT_NE(m.find("another vitpe process is writing"), std::string::npos) << m;
  ::close(fd);
  fs::remove_all(dir);
}

// A damaged last.safetensors (truncated by a full disk, a partial copy of the run) does not end
// the run: resume says so and continues from previous.safetensors, one epoch earlier, and the
// result is still bitwise the uninterrupted run's. With both damaged the error names both.
TEST(Train, ResumeFallsBackToThePreviousCheckpointWhenLastIsDamaged) {
  const fs::path a = train_temp_dir("fallback_full"), b = train_temp_dir("fallback_damaged");
  TrainOptions o = tiny_options();
  o.out = a.string();
  const TrainResult full = train(o);
  ASSERT_TRUE(full.finished);

  o.out = b.string();
  o.stop_after_epochs = 2;
  ASSERT_FALSE(train(o).finished);
  ASSERT_TRUE(fs::exists(b / "previous.safetensors"));
  const fs::path last = b / "last.safetensors";
  fs::resize_file(last, fs::file_size(last) / 2);

  o.resume = true;
  o.stop_after_epochs = 0;
  ::testing::internal::CaptureStderr();
  const TrainResult resumed = train(o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(resumed.finished);
  EXPECT_NE(err.find(last.string()), std::string::npos) << err;
  EXPECT_NE(err.find("resuming from " + (b / "previous.safetensors").string() + " (after epoch 1)"),
            std::string::npos)
      << err;
  auto pa = full.model->params(), pb = resumed.model->params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(pa[i]->value.f32(), pb[i]->value.f32(), pa[i]->value.nbytes()))
        << pa[i]->name << " differs";
  }
  ASSERT_EQ(resumed.history.size(), 3u);
  EXPECT_EQ(full.history.back().test_acc, resumed.history.back().test_acc);

  // Both checkpoints damaged: an error naming both files, nothing trained.
  fs::resize_file(last, 100);
  fs::resize_file(b / "previous.safetensors", 100);
  const std::string m = testing::message_of([&] { train(o); });
  EXPECT_NE(m.find("cannot resume"), std::string::npos) << m;
  EXPECT_NE(m.find("last.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("previous.safetensors"), std::string::npos) << m;
  fs::remove_all(a);
  fs::remove_all(b);
}

// A run started before the model config had crop_mode and interpolation (its recorded config
// lacks them) resumes and is reused by compare: fields added since, at their defaults, are not
// "other settings". A real difference still is.
TEST(Train, RunsRecordedBeforeNewConfigFieldsStillMatch) {
  const fs::path dir = train_temp_dir("old_fingerprint");
  TrainOptions o = tiny_options();
  o.epochs = 2;
  o.stop_after_epochs = 1;
  o.out = dir.string();
  ASSERT_FALSE(train(o).finished);
  // Rewrite last.safetensors as an older vitpe wrote it.
  const std::string last = (dir / "last.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;
  {
    const SafeTensorsFile f = SafeTensorsFile::open(last);
    for (const std::string& n : f.names()) tensors.emplace_back(n, f.get(n));
    meta = f.metadata();
  }
  nlohmann::json st = nlohmann::json::parse(meta.at("vitpe.train"));
  st["fingerprint"]["config"].erase("crop_mode");
  st["fingerprint"]["config"].erase("interpolation");
  meta["vitpe.train"] = st.dump();
  save_safetensors(last, tensors, meta);

  const ModelConfig config = make_train_config(o, *make_dataset(o.data));
  EXPECT_EQ(run_settings_diff(dir.string(), o, config), "");
  o.resume = true;
  o.stop_after_epochs = 0;
  EXPECT_TRUE(train(o).finished);
  o.lr = 0.5;
  EXPECT_NE(run_settings_diff(dir.string(), o, config).find("lr"), std::string::npos);
  fs::remove_all(dir);
}

// Numeric settings that once trained and exited 0 (a negative lr, a NaN warmup or clip) are
// refused before any data is read, naming the flag and the value.
// Multi-resolution batches: a run with learned tables met at three grids (their backward goes
// through the resampling) resumes bitwise as the uninterrupted one, a resumption with other sizes
// is refused naming them, and a size the patch does not divide is refused before anything is
// written.
TEST(Train, MultiResolutionBatchesResumeBitwiseAndAreRecorded) {
  const fs::path a = train_temp_dir("mres_full"), b = train_temp_dir("mres_resumed");
  TrainOptions o = tiny_options();
  o.encoding = "learned1d+relbias";
  o.epochs = 2;
  o.train_sizes = {12, 16, 20};
  o.out = a.string();
  TrainResult full = train(o);
  ASSERT_TRUE(full.finished);
  o.out = b.string();
  o.stop_after_epochs = 1;
  EXPECT_FALSE(train(o).finished);
  o.resume = true;
  o.stop_after_epochs = 0;
  TrainOptions other = o;
  other.train_sizes = {16, 20};
  const std::string m = testing::message_of([&] { train(other); });
  EXPECT_NE(m.find("train_sizes"), std::string::npos) << m;
  TrainResult resumed = train(o);
  ASSERT_TRUE(resumed.finished);
  auto pa = full.model->params(), pb = resumed.model->params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    ASSERT_EQ(0, std::memcmp(pa[i]->value.f32(), pb[i]->value.f32(), pa[i]->value.nbytes()))
        << pa[i]->name << " differs";
  // The same run at one size trains other weights.
  TrainOptions fixed = tiny_options();
  fixed.encoding = o.encoding;
  fixed.epochs = 2;
  TrainResult one = train(fixed);
  EXPECT_GT(testing::max_rel_error(one.model->params()[0]->value, pa[0]->value), 1e-6);

  const fs::path c = train_temp_dir("mres_bad");
  TrainOptions bad = tiny_options();
  bad.train_sizes = {16, 18};
  bad.out = c.string();
  const std::string mb = testing::message_of([&] { train(bad); });
  EXPECT_NE(mb.find("--train-sizes 18: expected a positive multiple of the patch size 4"),
            std::string::npos)
      << mb;
  EXPECT_FALSE(fs::exists(c));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Train, NonFiniteOrOutOfRangeSettingsAreRefused) {
  const std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>> cases = {
      {[](TrainOptions& o) { o.lr = -1; }, "--lr"},
      {[](TrainOptions& o) { o.lr = std::nan(""); }, "--lr"},
      {[](TrainOptions& o) { o.warmup_epochs = std::nan(""); }, "--warmup"},
      {[](TrainOptions& o) { o.warmup_epochs = -5; }, "--warmup"},
      {[](TrainOptions& o) { o.clip = std::nan(""); }, "--clip"},
      {[](TrainOptions& o) { o.smoothing = 1.5f; }, "--smoothing"},
      {[](TrainOptions& o) { o.weight_decay = -0.1; }, "--wd"},
      // The random-resized crop needs augmentation and sane ranges.
      {[](TrainOptions& o) {
         o.data.name = "folder:/no/such/folder";
         o.data.random_crop = RandomResizedCrop{};
         o.augment = false;
       },
       "--scale and --ratio with --no-augment"},
      {[](TrainOptions& o) {
         o.data.name = "folder:/no/such/folder";
         o.data.random_crop = RandomResizedCrop{};
         o.data.random_crop->scale_min = 0.9;
         o.data.random_crop->scale_max = 0.5;
       },
       "--scale 0.9"}};
  for (const auto& [edit, flag] : cases) {
    TrainOptions o = tiny_options();
    o.data.name = "no-such-dataset";  // proves the check comes before the data
    edit(o);
    const std::string m = testing::message_of([&] { train(o); });
    EXPECT_NE(m.find(flag), std::string::npos) << flag << ": " << m;
  }
}

// NaN weights (or a bad eps) give non-finite logits: evaluation says so instead of reporting an
// accuracy; an empty evaluation set is an error, not 0 %.
TEST(Train, EvaluationRefusesNonFiniteLogitsAndEmptySets) {
  TrainOptions o = tiny_options();
  DatasetOptions d = o.data;
  d.train = false;
  d.limit = 40;
  auto data = make_dataset(d);
  auto model = make_model(make_train_config(o, *data), 1);
  for (Param* p : model->params()) {
    if (p->name == "head.weight") p->value.fill(std::nan(""));
  }
  std::string m = testing::message_of([&] { evaluate(*model, *data, 16, false, "test"); });
  EXPECT_NE(m.find("not finite"), std::string::npos) << m;

  // A dataset without samples (whatever made it empty).
  struct Empty : Dataset {
    std::string name() const override { return "empty"; }
    int64_t size() const override { return 0; }
    int64_t classes() const override { return 4; }
    int64_t channels() const override { return 1; }
    int64_t rows() const override { return 16; }
    int64_t cols() const override { return 16; }
    int32_t get(int64_t, float*) const override { return 0; }
    std::vector<float> mean() const override { return {0.0f}; }
    std::vector<float> std_dev() const override { return {1.0f}; }
    std::string other_size_rule() const override { return "-"; }
  };
  m = testing::message_of([&] { evaluate(*model, Empty(), 16, false, "test"); });
  EXPECT_NE(m.find("has no samples"), std::string::npos) << m;

  ModelConfig bad = model->config();
  bad.vit().eps = -1;
  m = testing::message_of([&] { bad.validate(); });
  EXPECT_NE(m.find("eps must be in (0, 1)"), std::string::npos) << m;
}

// An image folder's splits are checked before any training: train/{a,b,c} with test/{a,c} is
// refused naming the missing class (it would score c's test images as b), with no run files
// written. A class folder whose name is not UTF-8, in a folder whose path is not either, trains
// to the end, and the model records the class with the bytes escaped (JSON cannot hold them
// raw), which a later evaluation compares alike; the run resumes (its recorded dataset path is
// escaped the same way).
TEST(Train, FolderClassesAreCheckedAndNamesThatAreNotUtf8AreStoredEscaped) {
  const fs::path dir = train_temp_dir("folder_classes") / "Bilder-\xe4";
  cv::Mat img(8, 8, CV_8UC3);
  auto write = [&](const fs::path& p) {
    fs::create_directories(p.parent_path());
    cv::randu(img, 0, 256);
    ASSERT_TRUE(cv::imwrite(p.string(), img)) << p;
  };
  for (const char* cls : {"a", "b", "caf\xe9"}) {
    for (int i = 0; i < 4; ++i) write(dir / "train" / cls / (std::to_string(i) + ".png"));
    if (std::string(cls) != "b") write(dir / "test" / cls / "0.png");
  }
  TrainOptions o = tiny_options();
  o.data = DatasetOptions{};
  o.data.name = "folder:" + dir.string();
  o.data.rows = o.data.cols = 8;
  o.overrides = {"patch=4", "depth=1", "dim=16", "heads=2", "mlp_dim=32"};
  o.test_limit = 0;
  o.epochs = 2;
  o.stop_after_epochs = 1;
  o.batch = 4;
  o.out = (dir / "run").string();
  const std::string m = testing::message_of([&] { train(o); });
  EXPECT_NE(m.find("only in the training split: 'b'"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir / "run"));
  write(dir / "test" / "b" / "0.png");
  TrainResult r = train(o);
  ASSERT_EQ(r.history.size(), 1u);
  const std::vector<std::string> want = {"a", "b", "caf\\xe9"};
  EXPECT_EQ(r.config.labels, want);
  LoadedModel lm = load_model((dir / "run" / "model.safetensors").string());
  EXPECT_EQ(lm.model->config().labels, want);
  DatasetOptions d = o.data;
  d.train = false;
  EXPECT_EQ(check_model_classes(lm.model->config().labels, 3, *make_dataset(d), false, "--x"), "");
  o.resume = true;
  o.stop_after_epochs = 0;
  r = train(o);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.history.size(), 2u);
  fs::remove_all(dir.parent_path());
}

TEST(Progress, LineShowsPercentRateAndEta) {
  Progress p("epoch 1/3", 200, nullptr);
  std::string l = p.line(50, "loss 0.5", 123.4, 10.0);
  EXPECT_NE(l.find("25%"), std::string::npos) << l;
  EXPECT_NE(l.find("50/200"), std::string::npos) << l;
  EXPECT_NE(l.find("123 img/s"), std::string::npos) << l;
  EXPECT_NE(l.find("ETA 0:30"), std::string::npos) << l;  // 10 s for 50, 150 to go
  EXPECT_NE(l.find("[======>"), std::string::npos) << l;
  std::string done = p.line(200, "", 1, 75);
  EXPECT_NE(done.find("took 1:15"), std::string::npos) << done;
  EXPECT_EQ(Progress::format_duration(3725), "1:02:05");
}

// ---- fine-tuning from a checkpoint (--init) ---------------------------------------------------

std::map<std::string, Tensor> snapshot(Model& m) {
  std::map<std::string, Tensor> out;
  for (Param* p : m.params()) out[p->name] = p->value.clone();
  return out;
}

void expect_bitwise(Model& m, const std::map<std::string, Tensor>& was,
                    const std::vector<std::string>& names) {
  std::map<std::string, Param*> by_name;
  for (Param* p : m.params()) by_name[p->name] = p;
  for (const std::string& n : names) {
    const Tensor& a = by_name.at(n)->value;
    const Tensor& b = was.at(n);
    ASSERT_EQ(a.shape(), b.shape()) << n;
    EXPECT_EQ(std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)), 0) << n;
  }
}

// A timm file with another class count: the head is new, every other tensor is the file's,
// bit for bit.
TEST(Init, ATimmFileWithOtherClassesKeepsEveryOtherTensorBitwise) {
  LoadOptions lo;
  lo.heads = 4;
  LoadedModel src = load_model(std::string(VITPE_TEST_DATA) + "/vit_timm.safetensors", lo);
  const auto was = snapshot(*src.model);
  ModelConfig c = src.model->config();
  c.classes = src.model->config().classes + 3;
  c.labels.clear();
  auto model = make_model(c, 3);
  const InitReport r = init_from(*model, *src.model);
  EXPECT_EQ(r.fresh, (std::vector<std::string>{"head.weight", "head.bias"}));
  EXPECT_TRUE(r.dropped.empty());
  EXPECT_TRUE(r.resampled.empty());
  EXPECT_EQ(r.loaded.size() + 2, model->params().size());
  expect_bitwise(*model, was, r.loaded);
  const std::string text = init_report_text(r, "vit_timm.safetensors");
  EXPECT_NE(text.find("2 new"), std::string::npos) << text;
  EXPECT_NE(text.find("new: head.weight (the checkpoint's is [10, 64], the model's [13, 64])"),
            std::string::npos)
      << text;
}

// Another encoding keeps every other tensor bitwise (the old table dropped, the new parts new);
// another image size resamples the learned table to the new grid.
TEST(Init, AnEncodingSwapKeepsTheRestAndANewSizeResamplesTheTable) {
  LoadOptions lo;
  lo.heads = 4;
  const std::string file = std::string(VITPE_TEST_DATA) + "/vit_timm.safetensors";
  LoadedModel src = load_model(file, lo);
  const auto was = snapshot(*src.model);
  ModelConfig c = src.model->config();
  c.encoding = "rope-mixed";
  auto swapped = make_model(c, 3);
  const InitReport r = init_from(*swapped, *src.model);
  EXPECT_EQ(r.dropped, (std::vector<std::string>{"pos_embed"}));
  ASSERT_FALSE(r.fresh.empty());
  for (const std::string& n : r.fresh) EXPECT_NE(n.find("rope.freqs"), std::string::npos) << n;
  EXPECT_EQ(r.loaded.size() + r.fresh.size(), swapped->params().size());
  expect_bitwise(*swapped, was, r.loaded);

  LoadedModel src2 = load_model(file, lo);
  ModelConfig big = src2.model->config();
  big.img_rows = big.img_rows * 3 / 2;  // a taller grid
  auto resized = make_model(big, 3);
  const InitReport r2 = init_from(*resized, *src2.model);
  EXPECT_EQ(r2.resampled, (std::vector<std::string>{"pos_embed"}));
  EXPECT_TRUE(r2.fresh.empty());
  EXPECT_TRUE(r2.dropped.empty());
}

// train --init: the run starts from the file and records it; resuming with another file is
// refused, naming it; a --set against the file's architecture is refused before training.
TEST(Init, TrainStartsFromTheFileAndResumeRefusesAnother) {
  const fs::path dir = train_temp_dir("init");
  TrainOptions o = tiny_options();
  o.epochs = 1;
  o.out = (dir / "first").string();
  train(o);
  TrainOptions f = tiny_options();
  f.init = (dir / "first" / "best.safetensors").string();
  f.encoding.clear();
  f.overrides.clear();
  f.epochs = 2;
  f.stop_after_epochs = 1;
  f.out = (dir / "tuned").string();
  const TrainResult r = train(f);
  EXPECT_EQ(r.history.size(), 1u);
  const std::string state = SafeTensorsFile::open((dir / "tuned" / "last.safetensors").string())
                                .metadata()
                                .at("vitpe.train");
  EXPECT_NE(state.find(file_fingerprint(f.init)), std::string::npos) << state;
  f.resume = true;
  f.init = (dir / "first" / "last.safetensors").string();
  const std::string m = testing::message_of([&] { train(f); });
  EXPECT_NE(m.find("init (run: "), std::string::npos) << m;
  // A --set that changes the file's architecture is refused, every conflict named, before any
  // file is written; one that keeps it, or changes only a name, is not a conflict.
  TrainOptions bad = tiny_options();
  bad.init = (dir / "first" / "best.safetensors").string();
  bad.encoding.clear();
  bad.overrides = {"depth=2", "dim=32", "heads=4", "label=mine"};
  bad.out = (dir / "bad").string();
  const std::string c = testing::message_of([&] { train(bad); });
  EXPECT_NE(c.find("architecture conflicts with --set"), std::string::npos) << c;
  EXPECT_NE(c.find("--set depth=2 (the checkpoint's 1)"), std::string::npos) << c;
  EXPECT_NE(c.find("--set heads=4 (the checkpoint's 2)"), std::string::npos) << c;
  EXPECT_EQ(c.find("dim="), std::string::npos) << c;
  EXPECT_EQ(c.find("label="), std::string::npos) << c;
  EXPECT_FALSE(fs::exists(bad.out));
  fs::remove_all(dir);
}
}  // namespace
}  // namespace vitpe
