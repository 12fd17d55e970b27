// run_compare's reuse of finished runs: only under the same training settings (a rerun with
// other epochs once reused 1-epoch runs under a report saying 3), and always evaluated again at
// the current sizes (an added size once showed 0.00).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "encodings/tables.h"
#include "tests/testing.h"
#include "vit/compare/compare.h"
#include "vit/compare/diagnostics.h"
#include "vit/compare/report.h"
#include "vit/io/checkpoint.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

CompareOptions tiny_study(const fs::path& out) {
  CompareOptions o;
  TrainOptions& t = o.train;
  t.model = "vit-fmnist";
  t.overrides = {"depth=1", "dim=32", "heads=2", "mlp_dim=64"};
  t.data.name = "procedural";
  t.data.rows = t.data.cols = 16;
  t.data.limit = 128;
  t.test_limit = 32;
  t.epochs = 1;
  t.batch = 32;
  t.progress = false;
  t.verbose = false;
  o.encodings = {"none", "sincos2d"};
  o.seeds = {1};
  o.sizes = {16, 20};
  o.out = out.string();
  o.pictures = false;
  return o;
}

TEST(Compare, ReusesFinishedRunsOnlyUnderTheSameSettingsAndEvaluatesThemAgain) {
  const fs::path out = fs::temp_directory_path() / ("vitpe_compare_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  CompareResults first = run_compare(o);
  ASSERT_EQ(first.runs.size(), 2u);

  o.train.epochs = 2;
  try {
    run_compare(o);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("trained with other settings"), std::string::npos) << m;
    EXPECT_NE(m.find("epochs (run: 1, now: 2)"), std::string::npos) << m;
  }

  o.train.epochs = 1;
  o.sizes = {16, 20, 24};
  CompareResults again = run_compare(o);
  ASSERT_EQ(again.runs.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(again.runs[r].accuracy.size(), 3u);
    EXPECT_EQ(again.runs[r].history.size(), first.runs[r].history.size());  // not retrained
    EXPECT_EQ(again.runs[r].accuracy[0], first.runs[r].accuracy[0]);        // same weights
    EXPECT_GT(again.runs[r].loss[2], 0.0);                                  // really evaluated
  }
  fs::remove_all(out);
}

// compare --init: every encoding's run starts from the checkpoint through train's own path (with
// --freeze head, every tensor but the head stays the file's, bit for bit), and results.json
// records the file with its hash; a recipe the model cannot take is refused before any file.
TEST(Compare, EveryRunStartsFromTheInitCheckpointAndTheResultsRecordIt) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_init_" + std::to_string(::getpid()));
  fs::remove_all(out);
  TrainOptions first = tiny_study(out).train;
  first.encoding = "none";
  first.out = (out / "first").string();
  train(first);
  const std::string init = (out / "first" / "model.safetensors").string();

  CompareOptions o = tiny_study(out / "study");
  o.train.init = init;
  o.train.freeze = "3";
  const std::string m = [&] {
    try {
      run_compare(o);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  }();
  EXPECT_NE(m.find("--freeze 3 is past the depth"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(out / "study")) << m;

  o.train.freeze = "head";
  const CompareResults r = run_compare(o);
  ASSERT_EQ(r.runs.size(), 2u);
  std::map<std::string, Tensor> start;
  LoadedModel file = load_model(init);
  for (Param* p : file.model->params()) start[p->name] = p->value.clone();
  for (const RunResult& run : r.runs) {
    const fs::path weights = out / "study" / "runs" / (run.encoding + "-s1") / "model.safetensors";
    LoadedModel tuned = load_model(weights.string());
    for (Param* p : tuned.model->params()) {
      const Tensor& was = start.at(p->name);
      const bool same = std::memcmp(was.f32(), p->value.f32(), was.numel() * sizeof(float)) == 0;
      EXPECT_EQ(same, p->name.rfind("head.", 0) != 0) << run.encoding << ": " << p->name;
    }
  }
  std::ifstream f(out / "study" / "results.json");
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find(init + " (fnv1a64 " + file_fingerprint(init) + ")"), std::string::npos);
  EXPECT_NE(text.str().find("\"freeze\""), std::string::npos);
  fs::remove_all(out);
}

// The reference of the paired differences must be one of the encodings, checked before any
// training; a good one is recorded in the results and the settings.
TEST(Compare, ReferenceEncodingIsCheckedAndRecorded) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_ref_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.reference = "rope-axial";
  try {
    run_compare(o);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'rope-axial' is not among the encodings compared (none, sincos2d)"),
              std::string::npos)
        << m;
  }
  EXPECT_FALSE(fs::exists(out / "runs")) << "nothing trained before the check";
  o.reference = "sincos2d";
  o.seeds = {1, 2};
  const CompareResults r = run_compare(o);
  EXPECT_EQ(r.reference, "sincos2d");
  EXPECT_TRUE(r.policies.empty()) << "the native rule alone: no policy columns";
  bool recorded = false;
  for (const auto& [k, v] : r.settings)
    recorded |= k == "paired differences against" && v == "sincos2d";
  EXPECT_TRUE(recorded);
  ASSERT_EQ(paired_differences(r).size(), 1u);
  EXPECT_EQ(paired_differences(r)[0].encoding, "none");
  EXPECT_EQ(paired_differences(r)[0].diff[0].n, 2);
  // Each run's cost at each size: GFLOPs growing with the size, a measured time.
  for (const RunResult& run : r.runs) {
    ASSERT_EQ(run.gflops.size(), 2u);
    ASSERT_EQ(run.ms_per_image.size(), 2u);
    EXPECT_GT(run.gflops[1], run.gflops[0]) << "20 px has more patches than 16";
    EXPECT_GT(run.ms_per_image[0], 0);
  }
  fs::remove_all(out);
}

// Both extension policies and two resolution protocols on the same trained models: the training
// size once, every other size once per (protocol, policy), each column labelled and recorded
// with the rule each kind followed there.
TEST(Compare, EvaluatesEveryPolicyAndProtocolOnTheSameModels) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_policy_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.encodings = {"sincos2d", "learned1d"};
  o.sizes = {16, 24};
  o.policies = {ExtensionPolicy::interpolate, ExtensionPolicy::extrapolate};
  o.protocols = {"zoom", "canvas"};
  const CompareResults r = run_compare(o);
  ASSERT_EQ(r.sizes, (std::vector<int64_t>{16, 24, 24, 24, 24}));
  ASSERT_EQ(r.policies, (std::vector<std::string>{"native", "interpolate", "extrapolate",
                                                  "interpolate", "extrapolate"}));
  ASSERT_EQ(r.protocols, (std::vector<std::string>{"", "zoom", "zoom", "canvas", "canvas"}));
  EXPECT_EQ(column_label(r, 0), "16");
  EXPECT_EQ(column_label(r, 1), "24 zoom interp");
  EXPECT_EQ(column_label(r, 4), "24 canvas extrap");
  ASSERT_EQ(r.runs.size(), 2u);
  for (const RunResult& run : r.runs) {
    ASSERT_EQ(run.accuracy.size(), 5u);
    ASSERT_EQ(run.extension_rules.size(), 5u);
    EXPECT_EQ(run.extension_rules[0], "-");
    EXPECT_EQ(run.extension_rules[1], run.encoding + " interpolate");
    EXPECT_EQ(run.extension_rules[2], run.encoding + " extrapolate");
    // The two rules, and the two protocols, really give other numbers on a grid 1.5x the
    // trained one.
    EXPECT_NE(run.loss[1], run.loss[2]) << run.encoding;
    EXPECT_NE(run.loss[1], run.loss[3]) << run.encoding;
    // Attention diagnostics per column: [block][head] distances, [block] entropies.
    ASSERT_EQ(run.attention_distance.size(), 5u);
    ASSERT_EQ(run.attention_distance[0].size(), 1u);     // depth 1
    ASSERT_EQ(run.attention_distance[0][0].size(), 2u);  // 2 heads
    ASSERT_EQ(run.attention_entropy.size(), 5u);
    EXPECT_GT(run.attention_entropy[1][0], run.attention_entropy[0][0]) << "more tokens at 24 px";
  }
  // Recorded in the files, and read back.
  const CompareResults back = parse_results_json(results_json(r));
  EXPECT_EQ(back.policies, r.policies);
  EXPECT_EQ(back.protocols, r.protocols);
  EXPECT_EQ(back.runs[0].extension_rules, r.runs[0].extension_rules);
  EXPECT_EQ(back.runs[0].attention_entropy, r.runs[0].attention_entropy);
  const std::string csv = results_csv(r);
  EXPECT_NE(csv.find(",acc_16,loss_16,acc_24_zoom_interp,loss_24_zoom_interp,acc_24_zoom_extrap,"),
            std::string::npos)
      << csv.substr(0, csv.find('\n'));
  EXPECT_NE(results_json(r).find("\"policy\": \"trained size\""), std::string::npos);
  bool recorded = false;
  for (const auto& [k, v] : r.settings)
    recorded |=
        k == "extension policies at other sizes" && v.rfind("interpolate,extrapolate", 0) == 0;
  EXPECT_TRUE(recorded);
  const std::string html = report_html(r);
  EXPECT_NE(html.find("Test accuracy at each image size, zoom, interpolate"), std::string::npos);
  EXPECT_NE(html.find("Test accuracy at each image size, canvas, extrapolate"), std::string::npos);
  EXPECT_NE(html.find("zoom: the training-size image resized"), std::string::npos);
  EXPECT_NE(html.find("Mean attention distance per head, at the training size"), std::string::npos);
  EXPECT_NE(html.find("Attention entropy against image size, canvas, extrapolate"),
            std::string::npos);
  // Uniform attention beside the diagnostics, on the 4x4 training grid (patch 4 at 16 px).
  EXPECT_NE(html.find("Grey: uniform attention, "), std::string::npos);
  char uniform[64];
  std::snprintf(uniform, sizeof uniform, "%.2f patches on the 4x4 training grid",
                uniform_attention_distance({4, 4}));
  EXPECT_NE(html.find(uniform), std::string::npos) << uniform;
  // Results without policies (written before, or native only) keep plain size labels.
  CompareResults plain = back;
  plain.policies.clear();
  plain.protocols.clear();
  EXPECT_FALSE(compares_policies(plain));
  EXPECT_EQ(column_label(plain, 1), "24");
  fs::remove_all(out);
}

// Non-square evaluation sizes (rows x cols) are columns of their own, labelled 24x16, rendered
// and evaluated at that shape under every policy, recorded in results.json and read back; patch
// resize skips them (a square patch cannot keep the grid), and charts against the side leave
// them to the tables.
TEST(Compare, NonSquareSizesAreColumnsOfTheirOwn) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_nonsquare_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.encodings = {"learned1d"};
  o.policies = {ExtensionPolicy::interpolate, ExtensionPolicy::extrapolate};
  o.sizes = {16, 24, 32};
  o.size_cols = {0, 16, 0};
  o.patch_resize = true;
  const CompareResults r = run_compare(o);
  std::vector<std::string> labels;
  for (size_t k = 0; k < r.sizes.size(); ++k) labels.push_back(column_label(r, k));
  EXPECT_EQ(labels, (std::vector<std::string>{"16", "24x16 interp", "24x16 extrap", "32 interp",
                                              "32 extrap", "32 patch"}));
  EXPECT_EQ(r.cols, (std::vector<int64_t>{0, 16, 16, 0, 0, 0}));
  ASSERT_EQ(r.runs.size(), 1u);
  const RunResult& run = r.runs[0];
  ASSERT_EQ(run.accuracy.size(), 6u);
  EXPECT_NE(run.loss[1], run.loss[2]);  // the learned table resampled vs held at its edges
  EXPECT_GT(run.gflops[1], run.gflops[0]);
  EXPECT_LT(run.gflops[1], run.gflops[3]);
  ASSERT_EQ(run.attention_distance.size(), 6u);
  std::map<std::string, std::string> settings(r.settings.begin(), r.settings.end());
  EXPECT_EQ(settings["evaluation sizes"], "16,24x16,32");
  EXPECT_NE(settings["extension policies at other sizes"].find("not at 24x16 px (not square)"),
            std::string::npos)
      << settings["extension policies at other sizes"];
  const CompareResults back = parse_results_json(results_json(r));
  EXPECT_EQ(back.cols, r.cols);
  EXPECT_EQ(column_label(back, 2), "24x16 extrap");
  EXPECT_NE(results_csv(r).find(",acc_24x16_interp,"), std::string::npos);
  const std::string html = report_html(r);
  EXPECT_NE(html.find("accuracy @24x16 extrap"), std::string::npos);
  EXPECT_EQ(html.find("Test accuracy at each image size, 24x16"), std::string::npos);
  // A width for a size that is not there is refused.
  o.size_cols = {0, 16, 0, 8};
  EXPECT_NE(testing::message_of([&] { run_compare(o); }).find("4 evaluation widths for 3"),
            std::string::npos);
  fs::remove_all(out);
}

// --patch-resize: one more column per other size and protocol where the patch scales to a whole
// number (patch 4 at 20 px: 8 at 40 px, none at 28 px), evaluated on the trained grid with the
// PI-resized embedding (its accuracy equals a model rebuilt by hand that way), recorded in the
// settings; a plan where no size allows it is refused before training.
TEST(Compare, PatchResizeColumnsKeepTheTrainedGrid) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_patch_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.encodings = {"learned1d"};
  o.train.data.rows = o.train.data.cols = 20;  // a 5x5 grid of 4-pixel patches
  o.sizes = {20, 28, 40};
  o.policies = {ExtensionPolicy::interpolate};
  o.patch_resize = true;
  const CompareResults r = run_compare(o);
  ASSERT_EQ(r.sizes, (std::vector<int64_t>{20, 28, 40, 40}));
  ASSERT_EQ(r.policies,
            (std::vector<std::string>{"native", "interpolate", "interpolate", "patch-resize"}));
  EXPECT_EQ(column_label(r, 3), "40 patch");
  ASSERT_EQ(r.runs.size(), 1u);
  const RunResult& run = r.runs[0];
  EXPECT_EQ(run.extension_rules[3], "patch 8 px (grid 5x5 as trained)");
  EXPECT_NE(run.loss[2], run.loss[3]);
  // The same number from the trained weights rebuilt by hand.
  auto trained = load_model((out / "runs" / "learned1d-s1" / "model.safetensors").string()).model;
  auto resized = with_patch_size(*trained, 8, 40, 40);
  DatasetOptions d = o.train.data;
  d.train = false;
  d.limit = o.train.test_limit;
  d.rows = d.cols = 40;
  d.base_rows = d.base_cols = 20;
  auto test = make_dataset(d);
  EXPECT_DOUBLE_EQ(evaluate(*resized, *test, 64, false, "").loss, run.loss[3]);
  bool recorded = false;
  for (const auto& [k, v] : r.settings)
    recorded |= k == "extension policies at other sizes" &&
                v.find("patch-resize (FlexiViT's PI-resized patch embedding, the trained grid "
                       "kept) at 40 px (patch 8); not at 28 px (not a whole patch)") !=
                    std::string::npos;
  EXPECT_TRUE(recorded);
  fs::remove_all(out);

  // A primary contrast naming a column the study does not have is refused before training.
  o.primary = {"learned1d vs learned1d @ 40 zoom"};
  const std::string mp = testing::message_of([&] { run_compare(o); });
  EXPECT_NE(mp.find("compare: --primary: primary contrast 'learned1d vs learned1d @ 40 zoom': "
                    "no column '40 zoom'"),
            std::string::npos)
      << mp;
  EXPECT_FALSE(fs::exists(out / "runs"));
  o.primary.clear();
  o.sizes = {20, 28};
  const std::string m = testing::message_of([&] { run_compare(o); });
  EXPECT_NE(m.find("--patch-resize: no evaluation size other than 20 px makes a whole patch"),
            std::string::npos)
      << m;
  EXPECT_FALSE(fs::exists(out / "runs"));
}

// --init-runs: each (encoding, seed) starts from its own earlier run's final weights (with a
// learning rate too small to move a float, it evaluates as that run did), the settings say so,
// and a run with nothing to start from is refused before any training.
TEST(Compare, InitRunsStartEachRunFromItsOwnEarlierRun) {
  const fs::path base = fs::temp_directory_path() / ("vitpe_compare_initruns_" + std::to_string(::getpid()));
  fs::remove_all(base);
  CompareOptions o = tiny_study(base / "first");
  o.encodings = {"learned1d", "rope-axial"};
  const CompareResults first = run_compare(o);

  CompareOptions ft = tiny_study(base / "tuned");
  ft.encodings.clear();  // the earlier comparison's
  ft.init_runs = (base / "first").string();
  ft.train.lr = 1e-30;
  ft.train.min_lr = 0;
  ft.train.weight_decay = 0;
  ft.train.model = "a preset name that init replaces";
  const CompareResults tuned = run_compare(ft);
  ASSERT_EQ(tuned.encodings, first.encodings);
  ASSERT_EQ(tuned.runs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(tuned.runs[i].accuracy, first.runs[i].accuracy) << tuned.runs[i].encoding;
    EXPECT_NEAR(tuned.runs[i].loss[0], first.runs[i].loss[0], 1e-5) << tuned.runs[i].encoding;
  }
  std::map<std::string, std::string> settings(tuned.settings.begin(), tuned.settings.end());
  EXPECT_NE(settings["init runs"].find("each run starts from the final weights of its own"),
            std::string::npos);
  EXPECT_EQ(settings.count("init"), 0u);

  CompareOptions missing = tiny_study(base / "none");
  missing.init_runs = (base / "first").string();
  missing.encodings = {"learned1d", "sincos2d"};
  missing.seeds = {1, 2};
  const std::string m = testing::message_of([&] { run_compare(missing); });
  EXPECT_NE(m.find("3 of the runs have no finished run to start from (learned1d seed 2, sincos2d "
                   "seed 1, sincos2d seed 2)"),
            std::string::npos)
      << m;
  EXPECT_FALSE(fs::exists(base / "none" / "runs"));
  fs::remove_all(base);
}

// A sweep with declared primary contrasts writes its report after every run, when the contrasts
// have fewer than 2 pairs: those say so (not testable yet) instead of stopping the sweep; once
// every run is in, each is tested over its seeds.
TEST(Compare, PrimaryContrastsWaitForTheirPairsWhileTheSweepRuns) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_primary_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.seeds = {1, 2};
  o.primary = {"sincos2d vs none @ 20"};
  const CompareResults r = run_compare(o);
  ASSERT_EQ(r.runs.size(), 4u);
  std::ifstream f(out / "results.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"primary_contrasts\""), std::string::npos);
  EXPECT_NE(text.find("\"testable\": true"), std::string::npos);
  EXPECT_NE(text.find("\"pairs\": 2"), std::string::npos);
  // What the report showed after the first run: one pair of none, none of sincos2d.
  CompareResults partial = r;
  partial.runs.resize(1);
  const std::string html = report_html(partial);
  EXPECT_NE(html.find("not testable yet"), std::string::npos);
  fs::remove_all(out);
}

// The settings say where a conditional encoding sits in the depth, and so how many blocks see
// no position, and what a grid-scaled base came to.
TEST(Compare, SettingsSayWherePegSitsInTheDepth) {
  const fs::path out = fs::temp_directory_path() / ("vitpe_compare_peg_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.train.overrides = {"depth=2", "dim=32", "heads=2", "mlp_dim=64"};
  o.encodings = {"none", "peg", "peg:after=0", "sincos2d:T=grid", "rope-axial:theta=grid",
                 "alibi2d:slopes=grid"};
  o.sizes = {16};
  const CompareResults r = run_compare(o);
  std::string where, scaled;
  for (const auto& [k, v] : r.settings) {
    if (k == "conditional encodings") where = v;
    if (k == "grid-scaled bases") scaled = v;
  }
  EXPECT_EQ(where,
            "peg: after block 1 of 2 (1 of 2 blocks position-blind); peg:after=0: after block 0 "
            "of 2 (every block sees position)");
  // And the numbers behind grid-scaled bases: D 32 (8 frequencies per axis), head dim 16 (4),
  // on the 4x4 grid; ALiBi's two heads both at one logit across the diagonal (its 2^-4 would be
  // gentler: the window is too small for a ladder).
  char want[256];
  std::snprintf(want, sizeof want,
                "sincos2d:T=grid: T=%.4g on the 4x4 grid; rope-axial:theta=grid: theta=%.4g on the "
                "4x4 window; alibi2d:slopes=grid: slopes=%.4g..%.4g per cell on the 4x4 window",
                grid_scaled_base(8, 4), grid_scaled_base(4, 4), 1 / std::hypot(3.0, 3.0),
                1 / std::hypot(3.0, 3.0));
  EXPECT_EQ(scaled, want);
  fs::remove_all(out);
}

// --budget: the plan is measured before the sweep (one real epoch of the first run, a few steps
// of each encoding); over the budget it is refused with what to cut and the probe run is
// removed (another plan must not resume it); within it the sweep continues the probe run.
TEST(Compare, BudgetRefusesAPlanThatWillNotFitAndKeepsTheProbeOfOneThatWill) {
  const fs::path out =
      fs::temp_directory_path() / ("vitpe_compare_budget_" + std::to_string(::getpid()));
  fs::remove_all(out);
  CompareOptions o = tiny_study(out);
  o.train.epochs = 2;
  o.seeds = {1, 2};
  o.budget_minutes = 1e-8;  // 0.6 microseconds: no probe epoch is that fast
  try {
    run_compare(o);
    ADD_FAILURE() << "expected the plan to be refused";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("compare: the plan needs about"), std::string::npos) << m;
    EXPECT_NE(m.find("4 runs (2 encodings x 2 seeds, 4 to train), 2 epochs of 128 images"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("over the budget of"), std::string::npos) << m;
    EXPECT_NE(m.find("raise --budget"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(out / "runs" / "none-s1")) << "the probe run is removed";

  o.budget_minutes = 1000;
  const CompareResults r = run_compare(o);
  ASSERT_EQ(r.runs.size(), 4u);
  EXPECT_EQ(r.runs[0].history.size(), 2u) << "the probe epoch, then the second";
  bool estimated = false;
  for (const auto& [k, v] : r.settings) estimated |= k == "estimated time";
  EXPECT_TRUE(estimated);
  fs::remove_all(out);
}

}  // namespace
}  // namespace vitpe
