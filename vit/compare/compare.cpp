// The comparison driver (see compare.h).
#include "vit/compare/compare.h"

#include <dnnl.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <opencv2/core/version.hpp>
#include <sstream>
#include <stdexcept>

#include "ops/files.h"
#include "ops/ops.h"
#include "ops/util.h"
#include "vit/compare/compare_pictures.h"
#include "vit/compare/diagnostics.h"
#include "vit/compare/report.h"
#include "vit/io/checkpoint.h"
#include "encodings/tables.h"
#include "vit/models/family.h"
#include "vit/train/run_dir.h"
#include "vitpe/vitpe_version.h"

namespace vitpe {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> default_encodings(const ModelConfig& model) {
  return default_study_encodings(family_of(model).layout);
}

std::vector<std::pair<std::string, std::string>> version_info() {
  std::vector<std::pair<std::string, std::string>> v;
  v.emplace_back("vitpe", version());
  const dnnl_version_t* d = dnnl_version();
  v.emplace_back("oneDNN", std::to_string(d->major) + "." + std::to_string(d->minor) + "." +
                               std::to_string(d->patch) + " (" + d->hash + ")");
  v.emplace_back("OpenCV", CV_VERSION);
#ifdef __VERSION__
  v.emplace_back("compiler", __VERSION__);
#endif
  v.emplace_back("threads", std::to_string(num_threads()));
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      v.emplace_back("cpu", line.substr(line.find(':') + 2));
      break;
    }
  }
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  v.emplace_back("date", buf);
  return v;
}

namespace {

template <class T>
std::vector<std::string> to_strings(const std::vector<T>& numbers) {
  std::vector<std::string> out;
  for (T n : numbers) out.push_back(std::to_string(n));
  return out;
}

json run_to_json(const RunResult& r) {
  CompareResults one;
  one.runs = {r};
  return json::parse(results_json(one)).at("runs").at(0);
}

RunResult run_from_json(const json& j) {
  CompareResults one;
  json wrap = {{"encodings", json::array()}, {"seeds", json::array()},
               {"sizes", json::array()},     {"train_size", 0},
               {"settings", json::object()}, {"versions", json::object()},
               {"runs", json::array({j})}};
  return parse_results_json(wrap.dump()).runs.at(0);
}

// An evaluation size, rows x cols pixels.
struct EvalSize {
  int64_t rows = 0, cols = 0;
  bool square() const { return rows == cols; }
  std::string str() const {
    std::string s = std::to_string(rows);
    if (!square()) {
      s += 'x';
      s += std::to_string(cols);
    }
    return s;
  }
  bool operator==(const EvalSize&) const = default;
};

// The evaluation sizes: given (with their widths where not square), or the training size and
// two larger ones of at least 8 px more each. Checked before hours of training, not after: every
// side must hold whole patches.
std::vector<EvalSize> evaluation_sizes(const std::vector<int64_t>& given,
                                       const std::vector<int64_t>& cols, const ModelConfig& base) {
  const int64_t train = base.img_rows;
  const int64_t step = base.patch * ((8 + base.patch - 1) / base.patch);
  const std::vector<int64_t> fallback = {train, train + step, train + 2 * step};
  if (cols.size() > given.size())
    throw std::invalid_argument("compare: " + std::to_string(cols.size()) +
                                " evaluation widths for " + std::to_string(given.size()) +
                                " evaluation sizes");
  std::vector<EvalSize> out;
  for (size_t i = 0; i < given.size(); ++i) {
    const EvalSize e{given[i], i < cols.size() && cols[i] > 0 ? cols[i] : given[i]};
    for (int64_t side : {e.rows, e.cols}) {
      if (side <= 0 || side % base.patch != 0) {
        throw std::invalid_argument(
            "compare: evaluation size " + e.str() + (e.square() ? std::string() : ": " + std::to_string(side) + " px") +
            " is not a positive multiple of the patch size " + std::to_string(base.patch) +
            " of this model; for example --eval-sizes " + join(to_strings(fallback), ","));
      }
    }
    out.push_back(e);
  }
  if (given.empty())
    for (int64_t f : fallback) out.push_back({f, f});
  return out;
}

// Each column's size once, in order.
std::vector<EvalSize> unique_sizes(const CompareResults& r) {
  std::vector<EvalSize> out;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    const EvalSize e{r.sizes[k], column_cols(r, k)};
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  }
  return out;
}

// Each square column's size once (the sizes the encoding pictures are drawn at).
std::vector<int64_t> unique_square_sizes(const CompareResults& r) {
  std::vector<int64_t> out;
  for (const EvalSize& e : unique_sizes(r))
    if (e.square()) out.push_back(e.rows);
  return out;
}

std::string size_list(const std::vector<EvalSize>& sizes) {
  std::string s;
  for (const EvalSize& e : sizes) s += (s.empty() ? "" : ",") + e.str();
  return s;
}

// The patch that keeps the training grid at size s (patch resize), or 0 when it is not whole.
int64_t resized_patch(int64_t patch, int64_t s, int64_t train_size) {
  return (patch * s) % train_size == 0 ? patch * s / train_size : 0;
}

// The patch that keeps the training grid at an evaluation size: square sizes only (a square
// patch scales both sides alike), 0 otherwise.
int64_t resized_patch(int64_t patch, const EvalSize& e, int64_t train_size) {
  return e.square() ? resized_patch(patch, e.rows, train_size) : 0;
}

// The patch-resize columns, as the settings table names them: "; patch-resize (FlexiViT's
// PI-resize, the trained grid kept) at 56 px (patch 8); not at 44 px (not a whole patch)".
std::string patch_resize_setting(int64_t patch, const CompareResults& r) {
  std::string with, fractional, oblong;
  auto add = [](std::string& to, const std::string& what) { to += (to.empty() ? "" : ", ") + what; };
  for (const EvalSize& e : unique_sizes(r)) {
    if (e == EvalSize{r.train_size, r.train_size}) continue;
    const int64_t q = resized_patch(patch, e, r.train_size);
    if (q > 0) {
      add(with, e.str() + " px (patch " + std::to_string(q) + ")");
    } else {
      add(e.square() ? fractional : oblong, e.str() + " px");
    }
  }
  return "; patch-resize (FlexiViT's PI-resized patch embedding, the trained grid kept) at " +
         with + (fractional.empty() ? "" : "; not at " + fractional + " (not a whole patch)") +
         (oblong.empty() ? "" : "; not at " + oblong + " (not square)");
}

std::string policies_setting(const std::vector<ExtensionPolicy>& policies) {
  std::vector<std::string> names;
  for (ExtensionPolicy p : policies) names.push_back(policy_name(p));
  return join(names, ",") + " (native: each kind's own rule, see `vitpe encodings list`)";
}

// Every setting the study ran with, in the order the report prints them.

// What the training samples went through, as the settings table says it: the crop (the
// dataset's padded shift, a random-resized crop, or none where the padding is 0) and the flips.
std::string augmentation_setting(const TrainOptions& t, const Dataset& probe) {
  if (!t.augment) return "off";
  std::string crop;
  if (t.data.random_crop) {
    crop = t.data.random_crop->text();
  } else if (probe.crop_padding() > 0) {
    crop = "random crop (padding " + std::to_string(probe.crop_padding()) + ")";
  } else {
    crop = "no crop (padding 0)";
  }
  return crop + (t.flip ? " + flips where the label allows" : ", no flips");
}

std::vector<std::pair<std::string, std::string>> study_settings(const CompareOptions& opt,
                                                                const ModelConfig& base,
                                                                const CompareResults& r,
                                                                const Dataset& probe) {
  ModelConfig none_cfg = base;
  none_cfg.encoding = "none";
  const TrainOptions& t = opt.train;
  std::vector<std::pair<std::string, std::string>> s = {
      {"model", t.model},
      {"model config (none)", none_cfg.to_json()},
      {"overrides", join(t.overrides, ",")},
      {"encodings", join(r.encodings, ",")},
      {"dataset", utf8_safe(t.data.name)},  // paths are bytes; the report's JSON needs UTF-8
      {"data dir", t.data.dir.empty() ? "(default)" : utf8_safe(t.data.dir)},
      {"train samples", t.data.limit ? std::to_string(t.data.limit) : "all"},
      {"test samples", t.test_limit ? std::to_string(t.test_limit) : "all"},
      {"image size (train)", std::to_string(base.img_rows) + "x" + std::to_string(base.img_cols)},
      {"epochs", std::to_string(t.epochs)},
      {"batch", std::to_string(t.batch)},
      {"lr (peak, min)", std::to_string(t.lr) + ", " + std::to_string(t.min_lr)},
      {"warmup epochs", std::to_string(t.warmup_epochs)},
      {"weight decay", std::to_string(t.weight_decay)},
      {"label smoothing", std::to_string(t.smoothing)},
      {"gradient clip", std::to_string(t.clip)},
      {"augmentation", augmentation_setting(t, probe)},
      {"data seed (procedural)", std::to_string(t.data.seed)},
      {"seeds", join(to_strings(r.seeds), ",")},
      {"paired differences against", reference_encoding(r)},
      {"evaluation sizes", size_list(unique_sizes(r))},
      {"extension policies at other sizes",
       policies_setting(opt.policies) +
           (opt.patch_resize ? patch_resize_setting(base.patch, r) : std::string())},
      {"resolution protocols at other sizes", opt.protocols.empty()
                                                  ? "the dataset's own: " + probe.other_size_rule()
                                                  : join(opt.protocols, ",")},
      {"evaluation at other sizes", probe.other_size_rule()}};
  // Recorded only when on, so results written before the option still match.
  if (t.adaptive_threads) s.push_back({"threads", "adaptive (results do not repeat bitwise)"});
  // The numbers behind option values "grid" (grid-scaled bases and ALiBi slopes), for each
  // encoding that asks.
  {
    std::string scaled;
    for (const std::string& enc : r.encodings) {
      ModelConfig c = base;
      c.encoding = enc;
      const std::vector<AttentionSite> sites = family_of(c).attention_sites(c);
      for (const EncodingSpec::Part& part : parse_encoding(enc).parts) {
        for (const auto& [key, value] : part.options) {
          if (value != "grid") continue;
          double v = 0;
          std::string over;
          if (part.kind == "alibi2d") {  // the ladder's ends: steepest..gentlest per cell
            if (sites.empty()) continue;
            const std::vector<double> sl = alibi2d_grid_slopes(sites[0].heads, sites[0].geom.window);
            char buf[128];
            std::snprintf(buf, sizeof buf, "%s=%.4g..%.4g per cell on the %s window", key.c_str(),
                          sl.front(), sl.back(), sites[0].geom.window.str().c_str());
            scaled += (scaled.empty() ? "" : "; ") + enc + ": " + buf;
            continue;
          }
          if (part.kind == "sincos2d") {
            const Grid g = c.patch_grid();
            v = grid_scaled_base(c.vit().dim / 4, std::max(g.rows, g.cols));
            over = g.str() + " grid";
          } else if (!sites.empty()) {
            const Grid w = sites[0].geom.window;
            v = grid_scaled_base(sites[0].head_dim / 4, std::max(w.rows, w.cols));
            over = w.str() + " window";
          }
          char buf[96];
          std::snprintf(buf, sizeof buf, "%s=%.4g on the %s", key.c_str(), v, over.c_str());
          scaled += (scaled.empty() ? "" : "; ") + enc + ": " + buf;
        }
      }
    }
    if (!scaled.empty()) s.push_back({"grid-scaled bases", scaled});
  }
  // Where each conditional encoding (PEG) sits in the depth: the blocks before it see no position.
  if (!base.is_swin()) {
    const int64_t depth = base.vit().depth;
    std::string where;
    for (const std::string& enc : r.encodings) {
      Rng rng(0);
      const std::unique_ptr<ConditionalEncoding> c =
          make_conditional_encoding(parse_encoding(enc), 8, {2, 2}, 0, rng);
      if (!c) continue;
      const int64_t after = c->after_block();
      where += (where.empty() ? "" : "; ") + enc + ": after block " + std::to_string(after) +
               " of " + std::to_string(depth) + " (" +
               (after == 0 ? std::string("every block sees position")
                           : std::to_string(after) + " of " + std::to_string(depth) +
                                 " blocks position-blind") +
               ")";
    }
    if (!where.empty()) s.push_back({"conditional encodings", where});
  }
  if (!t.train_sizes.empty()) {
    s.push_back({"training regime", "multi-resolution batches: each resized to one of " +
                                        join(to_strings(t.train_sizes), ",") +
                                        " px, drawn per batch (bilinear, antialiased)"});
  }
  // Fine-tuning: every run starts from this checkpoint (its bytes' hash, as each run records it),
  // or each from its own earlier run (each run records its file's hash).
  if (!opt.init_runs.empty()) {
    s.push_back({"init runs", utf8_safe(opt.init_runs) +
                                  ": each run starts from the final weights of its own encoding "
                                  "and seed there (runs/ENC-sSEED/model.safetensors)"});
  } else if (!t.init.empty()) {
    s.push_back({"init", utf8_safe(t.init) + " (fnv1a64 " + file_fingerprint(t.init) + ")"});
  }
  if (t.layer_decay != 1.0) s.push_back({"layer decay", std::to_string(t.layer_decay)});
  if (!t.freeze.empty()) s.push_back({"freeze", utf8_safe(t.freeze)});
  if (t.head_lr > 0) s.push_back({"head lr", std::to_string(t.head_lr)});
  for (const auto& kv : opt.extra_settings) s.push_back(kv);
  return s;
}

// The test split rendered for each evaluation column (its size and protocol, from the training
// size; shared by all runs; columns that differ only in policy share one dataset).
std::vector<std::shared_ptr<Dataset>> test_sets(const TrainOptions& t, const CompareResults& r) {
  std::vector<std::shared_ptr<Dataset>> tests;
  std::map<std::tuple<int64_t, int64_t, std::string>, std::shared_ptr<Dataset>> made;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    std::shared_ptr<Dataset>& d = made[{r.sizes[k], column_cols(r, k), column_protocol(r, k)}];
    if (!d) {
      DatasetOptions o = t.data;
      o.train = false;
      o.limit = t.test_limit;
      o.rows = r.sizes[k];
      o.cols = column_cols(r, k);
      o.protocol = column_protocol(r, k);
      o.base_rows = o.base_cols = r.train_size;
      d = make_dataset(o);
    }
    tests.push_back(d);
  }
  return tests;
}

// The evaluation columns: each size under each protocol and each policy, the training size once
// (native, the dataset itself).
void evaluation_columns(CompareResults& r, const std::vector<EvalSize>& sizes,
                        const std::vector<std::string>& protocols,
                        const std::vector<ExtensionPolicy>& policies, int64_t patch_resize) {
  r.sizes.clear();
  r.cols.clear();
  r.policies.clear();
  r.protocols.clear();
  const std::vector<std::string> each =
      protocols.empty() ? std::vector<std::string>{""} : protocols;
  auto column = [&](const EvalSize& e, const std::string& policy, const std::string& proto) {
    r.sizes.push_back(e.rows);
    r.cols.push_back(e.square() ? 0 : e.cols);
    r.policies.push_back(policy);
    r.protocols.push_back(proto);
  };
  for (const EvalSize& e : sizes) {
    if (e == EvalSize{r.train_size, r.train_size}) {
      column(e, policy_name(ExtensionPolicy::native), "");
      continue;
    }
    for (const std::string& proto : each) {
      for (ExtensionPolicy p : policies) column(e, policy_name(p), proto);
      if (patch_resize > 0 && resized_patch(patch_resize, e, r.train_size) > 0)
        column(e, kPatchResize, proto);
    }
  }
  // Every column square: results as before.
  if (std::all_of(r.cols.begin(), r.cols.end(), [](int64_t c) { return c == 0; })) r.cols.clear();
  // Only the native rule everywhere / the dataset's own protocol: results as before.
  if (!compares_policies(r)) r.policies.clear();
  if (!compares_protocols(r)) r.protocols.clear();
}

// Which rank does each of n runs: rank 0 looks at the shared output folder once (`finished`)
// and deals the runs still to train round-robin first, then the finished ones (evaluated
// again), so a resumed sweep spreads its remaining training over every rank. One process: all 0.
std::vector<int> sweep_owners(Communicator& comm, size_t n,
                              const std::function<bool(size_t)>& finished) {
  std::vector<int> owner(n, 0);
  if (comm.size() == 1) return owner;
  std::string dealt;
  if (comm.rank() == 0) {
    int next = 0;
    for (bool pass_finished : {false, true}) {
      for (size_t i = 0; i < n; ++i) {
        if (finished(i) != pass_finished) continue;
        owner[i] = next;
        next = (next + 1) % comm.size();
      }
    }
    dealt = json(owner).dump();
  }
  comm.broadcast(dealt, 0);
  return json::parse(dealt).get<std::vector<int>>();
}

// Every rank's (index, result) pairs at rank 0 (the others get theirs back).
std::vector<std::pair<size_t, RunResult>> gather_runs(
    Communicator& comm, const std::vector<std::pair<size_t, RunResult>>& mine) {
  json j = json::array();
  for (const auto& [i, run] : mine) j.push_back({{"index", i}, {"run", run_to_json(run)}});
  const std::vector<std::string> texts = comm.gather(j.dump(), 0);
  if (comm.rank() != 0) return mine;
  std::vector<std::pair<size_t, RunResult>> all;
  for (const std::string& text : texts) {
    for (const json& e : json::parse(text)) {
      all.emplace_back(e.at("index").get<size_t>(), run_from_json(e.at("run")));
    }
  }
  return all;
}

// The final weights of an earlier comparison's (encoding, seed) run (CompareOptions::init_runs).
fs::path init_run_file(const std::string& dir, const std::string& enc, uint64_t seed) {
  return fs::path(dir) / "runs" / (enc + "-s" + std::to_string(seed)) / "model.safetensors";
}

// The training options of one (encoding, seed) run in its own directory (started from its own
// earlier run's weights with init_runs).
TrainOptions run_options(const TrainOptions& train, const std::string& enc, uint64_t seed,
                         const fs::path& dir, const std::string& init_runs) {
  TrainOptions to = train;
  to.encoding = enc;
  to.seed = seed;
  to.out = dir.string();
  to.resume = true;
  if (!init_runs.empty()) to.init = init_run_file(init_runs, enc, seed).string();
  return to;
}

// With init_runs: the encodings (the earlier comparison's when none are given), every run's
// starting file checked, and train.init set to the first one (the geometry every run shares).
void check_init_runs(CompareOptions& opt) {
  if (opt.init_runs.empty()) return;
  if (!opt.train.init.empty()) {
    throw std::invalid_argument("compare: --init-runs starts each run from its own earlier run; "
                                "--init (one checkpoint for every run) cannot be given with it");
  }
  if (opt.encodings.empty()) {
    const fs::path earlier = fs::path(opt.init_runs) / "results.json";
    std::ifstream f(earlier);
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      opt.encodings = parse_results_json(ss.str()).encodings;
    } catch (const std::exception& e) {
      throw std::invalid_argument("compare: --init-runs " + opt.init_runs + ": no --encodings given "
                                  "and " + earlier.string() + " does not list them (" + e.what() +
                                  "); give --encodings");
    }
  }
  std::vector<std::string> missing;
  for (const std::string& enc : opt.encodings)
    for (uint64_t seed : opt.seeds)
      if (!fs::is_regular_file(init_run_file(opt.init_runs, enc, seed)))
        missing.push_back(enc + " seed " + std::to_string(seed));
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 5);
    throw std::invalid_argument(
        "compare: --init-runs " + opt.init_runs + ": " + std::to_string(missing.size()) +
        " of the runs have no finished run to start from (" +
        join(std::vector<std::string>(missing.begin(), missing.begin() + shown), ", ") +
        (missing.size() > shown ? ", ..." : "") +
        "); expected runs/ENC-sSEED/model.safetensors there, as compare writes them");
  }
  opt.train.init = init_run_file(opt.init_runs, opt.encodings[0], opt.seeds[0]).string();
}

// What one image costs the model at the dataset's size: GFLOPs (the estimate of a model of that
// size) and the measured forward time per image, median of 5 batches of up to 32 test images
// after one warm-up batch.
void measure_cost(RunResult& run, Model& model, const Dataset& data) {
  ModelConfig at = model.config();
  at.img_rows = data.rows();
  at.img_cols = data.cols();
  run.gflops.push_back(make_model(at, 0)->flops_per_image() / 1e9);
  const int64_t n = std::min<int64_t>(32, data.size());
  Tensor x = Tensor::empty({n, data.channels(), data.rows(), data.cols()});
  for (int64_t i = 0; i < n; ++i) data.get(i, x.f32() + i * data.image_numel());
  std::vector<double> ms;
  for (int rep = 0; rep < 6; ++rep) {
    const double t0 = monotonic_seconds();
    model.forward(x, false);
    if (rep > 0) ms.push_back(1e3 * (monotonic_seconds() - t0) / static_cast<double>(n));
  }
  std::sort(ms.begin(), ms.end());
  run.ms_per_image.push_back(ms[ms.size() / 2]);
}

// Accuracy and loss of a trained model at every evaluation size (the stored ones are never
// reused: the sizes may have changed since), printed on one line, and its cost there.
void evaluate_run(RunResult& run, Model& model, const TrainOptions& to, const CompareResults& r,
                  const std::vector<std::shared_ptr<Dataset>>& tests) {
  run.accuracy.clear();
  run.loss.clear();
  run.gflops.clear();
  run.ms_per_image.clear();
  run.extension_rules.clear();
  run.attention_distance.clear();
  run.attention_entropy.clear();
  std::string accs;
  for (size_t s = 0; s < r.sizes.size(); ++s) {
    const std::string policy = column_policy(r, s);
    // Patch resize: the same model with larger patches on the trained grid, its own policy
    // native (its encoding meets only the grid it was trained on).
    std::unique_ptr<Model> resized;
    if (policy == kPatchResize) {
      model.set_extension_policy(ExtensionPolicy::native);
      const int64_t patch = resized_patch(model.config().patch, r.sizes[s], r.train_size);
      resized = with_patch_size(model, patch, r.sizes[s], column_cols(r, s));
    } else {
      model.set_extension_policy(parse_policy(policy));
    }
    Model& m = resized ? *resized : model;
    const std::string label = column_label(r, s);
    EvalResult ev = evaluate(m, *tests[s], to.eval_batch, to.progress, "  @" + label, nullptr,
                             to.adaptive_threads);
    run.accuracy.push_back(ev.accuracy);
    run.loss.push_back(ev.loss);
    run.extension_rules.push_back(
        is_train_column(r, s)
            ? "-"
            : resized ? "patch " + std::to_string(resized->config().patch) + " px (grid " +
                            resized->config().patch_grid().str() + " as trained)"
                      : m.extension_rules());
    const AttentionStats stats = [&] {
      const FixedWorkSplit fixed;  // the same numbers on any thread count, as evaluate's
      return attention_stats(m, *tests[s]);
    }();
    if (!stats.empty()) {
      run.attention_distance.push_back(stats.distance);
      run.attention_entropy.push_back(stats.entropy);
    }
    measure_cost(run, m, *tests[s]);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s@%s %.2f%%", s ? ", " : "", label.c_str(), 100 * ev.accuracy);
    accs += buf;
  }
  model.set_extension_policy(ExtensionPolicy::native);
  std::fprintf(stderr, "%s  %s seed %llu: %s\n", rank_prefix().c_str(), run.encoding.c_str(),
               static_cast<unsigned long long>(run.seed), accs.c_str());
}

// One (encoding, seed) run: trained (or resumed) in its own directory, then evaluated at every
// size; its result.json is written last, so a finished run is not trained again.
RunResult train_and_evaluate(const TrainOptions& to, const std::string& enc, uint64_t seed,
                             const CompareResults& r,
                             const std::vector<std::shared_ptr<Dataset>>& tests) {
  TrainResult tr = train(to);
  if (!tr.finished) throw std::runtime_error("compare: run " + to.out + " stopped early");
  RunResult run;
  run.encoding = enc;
  run.seed = seed;
  run.params = tr.params;
  run.params_added = tr.model->num_encoding_params();
  run.train_seconds = tr.train_seconds;
  run.history = tr.history;
  evaluate_run(run, *tr.model, to, r, tests);
  write_file_atomic((fs::path(to.out) / "result.json").string(), run_to_json(run).dump(2) + "\n");
  return run;
}

// A finished run, reused only when it was trained with this study's settings (else an error
// naming what differs), and evaluated again at this study's sizes from its final weights.
RunResult reuse_finished(const TrainOptions& to, const Dataset& probe, const CompareResults& r,
                         const std::vector<std::shared_ptr<Dataset>>& tests) {
  const std::string diff = run_settings_diff(to.out, to, train_config(to, probe));
  if (!diff.empty()) {
    throw std::runtime_error("compare: " + to.out + " was trained with other settings: " + diff +
                             "; use a new --out, or remove that run to train it again");
  }
  std::ifstream f(fs::path(to.out) / "result.json");
  std::stringstream ss;
  ss << f.rdbuf();
  RunResult run = run_from_json(json::parse(ss.str()));
  LoadedModel trained = load_model((fs::path(to.out) / "model.safetensors").string());
  evaluate_run(run, *trained.model, to, r, tests);
  return run;
}

// Seconds one training step of `enc` takes with the study's settings: short trainings without
// files (the test split cut to one batch) of 2 and of 2 + M steps, M doubled until the
// difference is at least a second, so model building, data loading and timer noise cancel out.
double step_seconds(const TrainOptions& base, const std::string& enc, int64_t steps_per_epoch) {
  auto run = [&](int64_t steps) {
    TrainOptions t = base;
    t.encoding = enc;
    t.out.clear();
    t.resume = false;
    t.progress = false;
    t.verbose = false;
    t.epochs = 1;
    t.stop_after_epochs = 0;
    t.data.limit = steps * t.batch;
    t.test_limit = t.batch;
    t.comm = nullptr;
    const double t0 = monotonic_seconds();
    train(t);
    return monotonic_seconds() - t0;
  };
  const double two = run(2);
  for (int64_t m = 8;; m *= 2) {
    const double diff = run(2 + m) - two;
    if (diff >= 1.0 || m >= steps_per_epoch) return std::max(1e-5, diff / static_cast<double>(m));
  }
}

// "83 min" (or "45 s" under a minute).
std::string minutes(double seconds) {
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f min", seconds / 60.0);
  }
  return buf;
}

// The study's cost: a real first epoch of the first unfinished run (single process; the sweep
// continues that run), the step time of every encoding, scaled to the full plan: training
// epochs x steps of each unfinished run (the measured epoch calibrates the step times: it
// includes the per-epoch evaluation and the loader), and every run's evaluation at every
// column (a forward costs about a third of a training step, growing with the pixel count).
PlanEstimate estimate_plan(const CompareOptions& opt, const CompareResults& r,
                           const std::vector<std::pair<std::string, uint64_t>>& all,
                           const std::function<fs::path(size_t)>& run_dir, int ranks) {
  PlanEstimate e;
  const TrainOptions& t = opt.train;
  DatasetOptions d = t.data;
  const int64_t train_n = make_dataset(d)->size();
  d.train = false;
  d.limit = t.test_limit;
  const int64_t test_n = make_dataset(d)->size();
  const int64_t steps_per_epoch = (train_n + t.batch - 1) / t.batch;
  std::map<std::string, double> step;
  for (const std::string& enc : r.encodings) {
    std::fprintf(stderr, "estimating the plan: %s ...\n", enc.c_str());
    step[enc] = step_seconds(t, enc, steps_per_epoch);
  }
  // The probe epoch: the first run that has nothing yet, trained for one epoch for real.
  double calibration = 1.1;  // without a probe: loader and per-epoch evaluation, roughly
  std::vector<bool> probed(all.size(), false);
  if (ranks == 1) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (fs::exists(run_dir(i) / "result.json") || fs::exists(run_dir(i) / "last.safetensors"))
        continue;
      TrainOptions to = run_options(t, all[i].first, all[i].second, run_dir(i), opt.init_runs);
      to.stop_after_epochs = 1;
      std::fprintf(stderr,
                   "estimating the plan: one epoch of %s seed %llu (kept: the run goes on "
                   "from it) ...\n",
                   all[i].first.c_str(), static_cast<unsigned long long>(all[i].second));
      e.probe_dir = run_dir(i).string();
      TrainResult probe = train(to);
      if (!probe.history.empty()) {
        e.probe_epoch_seconds = probe.history.back().seconds;
        calibration =
            e.probe_epoch_seconds / (step[all[i].first] * static_cast<double>(steps_per_epoch));
        calibration = std::clamp(calibration, 0.5, 5.0);
        probed[i] = true;
      }
      break;
    }
  }
  double pixels = 0;  // evaluation images' pixel count relative to the training size, summed
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    pixels += static_cast<double>(r.sizes[k]) * static_cast<double>(column_cols(r, k)) /
              (static_cast<double>(r.train_size) * static_cast<double>(r.train_size));
  }
  size_t unfinished = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const double per_step = step[all[i].first];
    const bool finished = fs::exists(run_dir(i) / "result.json");
    if (!finished) {
      const int64_t epochs = t.epochs - (probed[i] ? 1 : 0);
      e.train_seconds += calibration * per_step * static_cast<double>(steps_per_epoch * epochs);
      ++unfinished;
    }
    // A forward of one image ~ a third of its share of a training step; plus the cost
    // measurement (6 batches of 32) at each column.
    const double forward = per_step / static_cast<double>(t.batch) / 3.0;
    e.evaluation_seconds += forward * pixels * static_cast<double>(test_n + 6 * 32);
  }
  e.train_seconds /= ranks;
  e.evaluation_seconds /= ranks;
  e.total_seconds = e.train_seconds + e.evaluation_seconds;
  std::ostringstream sum;
  sum << all.size() << " runs (" << r.encodings.size() << " encodings x " << r.seeds.size()
      << " seeds, " << unfinished << " to train), " << t.epochs << " epochs of " << train_n
      << " images in batches of " << t.batch << ", " << r.sizes.size() << " evaluation columns of "
      << test_n << " images";
  if (ranks > 1) sum << ", over " << ranks << " ranks";
  if (e.probe_epoch_seconds > 0) sum << "; measured: one epoch " << minutes(e.probe_epoch_seconds);
  e.summary = sum.str();
  return e;
}

// The refusal of a plan over the budget, with the single cuts that would fit it.
std::string over_budget(const CompareOptions& opt, const CompareResults& r, const PlanEstimate& e) {
  const double budget = opt.budget_minutes * 60.0;
  std::ostringstream m;
  m << "compare: the plan needs about " << minutes(e.total_seconds) << " (training "
    << minutes(e.train_seconds) << ", evaluation " << minutes(e.evaluation_seconds) << "; "
    << e.summary << "), over the budget of " << minutes(budget) << ". To fit it, cut one of:";
  const size_t S = r.seeds.size();
  for (size_t s = S - 1; s >= 1; --s) {
    const double t = e.total_seconds * static_cast<double>(s) / static_cast<double>(S);
    if (t <= budget) {
      std::vector<std::string> keep;
      for (size_t k = 0; k < s; ++k) keep.push_back(std::to_string(r.seeds[k]));
      m << " --seeds " << join(keep, ",") << " (about " << minutes(t) << ");";
      break;
    }
  }
  const double rest = budget - e.evaluation_seconds;
  if (rest > 0 && e.train_seconds > 0) {
    const auto epochs =
        static_cast<int64_t>(static_cast<double>(opt.train.epochs) * rest / e.train_seconds);
    if (epochs >= 1) m << " --epochs " << epochs << ";";
    m << " fewer training images (--subset), or fewer --encodings, --eval-sizes, --protocol, "
         "--policy columns or --test-subset;";
  } else {
    m << " the evaluation alone is over it: fewer --eval-sizes, --protocol or --policy columns, "
         "or a smaller --test-subset;";
  }
  m << " or raise --budget (minutes; 0: no limit).";
  return m.str();
}

// Pictures of every encoding: the trained weights of the first seed where its run has them.
void add_pictures(CompareResults& r, const ModelConfig& base, const std::string& out) {
  for (const std::string& enc : r.encodings) {
    ModelConfig c = base;
    c.encoding = enc;
    const fs::path weights =
        fs::path(out) / "runs" / (enc + "-s" + std::to_string(r.seeds[0])) / "model.safetensors";
    std::unique_ptr<Model> trained;
    if (fs::exists(weights)) trained = load_model(weights.string()).model;
    std::vector<Picture> pics;
    try {
      pics = encoding_pictures(c, trained.get(), (fs::path(out) / "pictures").string(),
                               unique_square_sizes(r));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pictures of %s: %s (left out of the report)\n", enc.c_str(), e.what());
    }
    // The report links the files: their paths relative to the results folder.
    for (Picture& p : pics) p.file = fs::path(p.file).lexically_relative(out).generic_string();
    if (!pics.empty()) r.pictures.emplace_back(enc, std::move(pics));
  }
}

}  // namespace

CompareResults run_compare(const CompareOptions& options) {
  // An image folder renders with the model's own transforms in every run and column.
  CompareOptions opt = options;
  if (opt.out.empty()) throw std::invalid_argument("compare: an output directory is required");
  if (opt.seeds.empty()) throw std::invalid_argument("compare: at least one seed is required");
  check_init_runs(opt);
  use_model_transform(opt.train);
  const double wall0 = monotonic_seconds();

  // Geometry and the model family come from the training set and the preset (or the --init
  // checkpoint every run starts from, through train's own path).
  DatasetOptions probe = opt.train.data;
  probe.limit = 1;
  std::unique_ptr<Dataset> probe_data = make_dataset(probe);
  const ModelConfig base = train_config(opt.train, *probe_data);
  // A fine-tuning recipe the model cannot take (--freeze past its depth) is refused before any
  // file is written, not at the first run.
  make_optimizer(*make_model(base, 0), opt.train);
  fs::create_directories(opt.out);

  CompareResults r;
  r.encodings = opt.encodings.empty() ? default_encodings(base) : opt.encodings;
  r.seeds = opt.seeds;
  if (!opt.reference.empty() &&
      std::find(r.encodings.begin(), r.encodings.end(), opt.reference) == r.encodings.end()) {
    throw std::invalid_argument("compare: the reference encoding '" + opt.reference +
                                "' is not among the encodings compared (" +
                                join(r.encodings, ", ") + ")");
  }
  r.reference = opt.reference;
  r.train_size = base.img_rows;
  if (opt.policies.empty()) throw std::invalid_argument("compare: at least one policy is required");
  for (const std::string& p : opt.protocols) protocol_description(p);  // checks the names
  const std::vector<EvalSize> sizes = evaluation_sizes(opt.sizes, opt.size_cols, base);
  if (opt.patch_resize) {
    if (base.is_swin()) {
      throw std::invalid_argument("compare: --patch-resize needs a ViT-family model (Swin's "
                                  "windows and patch merging are built for its patch size)");
    }
    bool any = false;
    for (const EvalSize& e : sizes)
      any |= e != EvalSize{r.train_size, r.train_size} && resized_patch(base.patch, e, r.train_size) > 0;
    if (!any) {
      throw std::invalid_argument(
          "compare: --patch-resize: no evaluation size other than " +
          std::to_string(r.train_size) + " px makes a whole patch (patch " +
          std::to_string(base.patch) + " x size / " + std::to_string(r.train_size) +
          "); choose --eval-sizes that are multiples of " +
          std::to_string(r.train_size / std::gcd(base.patch, r.train_size)));
    }
  }
  evaluation_columns(r, sizes, opt.protocols, opt.policies, opt.patch_resize ? base.patch : 0);
  r.primary = opt.primary;
  for (const std::string& c : r.primary) {
    try {
      parse_primary(r, c);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("compare: --primary: ") + e.what());
    }
  }
  if (!(opt.success_threshold >= 0 && opt.success_threshold <= 1)) {
    throw std::invalid_argument("compare: --success-threshold must be an accuracy in 0..100 %, got " +
                                std::to_string(100 * opt.success_threshold));
  }
  r.success_threshold = opt.success_threshold;
  r.title = "Positional encodings compared: " + base.name + " on " + probe_data->name();
  r.settings = study_settings(opt, base, r, *probe_data);
  r.versions = version_info();
  const std::vector<std::shared_ptr<Dataset>> tests = test_sets(opt.train, r);

  // Every (encoding, seed) run in the order of the table; under mpirun they are shared out.
  std::vector<std::pair<std::string, uint64_t>> all;
  for (const std::string& enc : r.encodings) {
    for (uint64_t seed : r.seeds) all.emplace_back(enc, seed);
  }
  auto run_dir = [&](size_t i) {
    return fs::path(opt.out) / "runs" / (all[i].first + "-s" + std::to_string(all[i].second));
  };
  Communicator& comm = opt.comm ? *opt.comm : self();
  if (opt.budget_minutes > 0) {
    // Rank 0 estimates (and, alone, trains the probe epoch); every rank gets the verdict.
    std::string verdict;
    if (comm.rank() == 0) {
      const PlanEstimate e = estimate_plan(opt, r, all, run_dir, comm.size());
      if (e.total_seconds > opt.budget_minutes * 60.0) {
        verdict = over_budget(opt, r, e);
        // The probe run was made here for this plan; another plan must not resume it.
        if (!e.probe_dir.empty()) fs::remove_all(e.probe_dir);
      } else {
        std::fprintf(stderr,
                     "plan: about %s (training %s, evaluation %s) within the budget of %s "
                     "(%s)\n",
                     minutes(e.total_seconds).c_str(), minutes(e.train_seconds).c_str(),
                     minutes(e.evaluation_seconds).c_str(),
                     minutes(opt.budget_minutes * 60).c_str(), e.summary.c_str());
        r.settings.emplace_back("estimated time",
                                minutes(e.total_seconds) + " (" + e.summary + ")");
      }
    }
    comm.broadcast(verdict, 0);
    if (!verdict.empty()) throw std::runtime_error(verdict);
  }
  const std::vector<int> owner = sweep_owners(
      comm, all.size(), [&](size_t i) { return fs::exists(run_dir(i) / "result.json"); });
  TrainOptions train = opt.train;
  if (comm.size() > 1) {
    // Each rank prints its own runs' lines (prefixed); progress bars would interleave.
    train.progress = false;
    train.verbose = false;
  }
  const std::string who = rank_prefix();
  std::vector<size_t> mine;
  for (size_t i = 0; i < all.size(); ++i) {
    if (owner[i] == comm.rank()) mine.push_back(i);
  }
  std::vector<std::pair<size_t, RunResult>> done;
  for (size_t i : mine) {
    const auto& [enc, seed] = all[i];
    const fs::path dir = run_dir(i), finished = dir / "result.json";
    std::fprintf(stderr, "%s[%zu/%zu] %s seed %llu%s\n", who.c_str(), i + 1, all.size(),
                 enc.c_str(), static_cast<unsigned long long>(seed),
                 fs::exists(finished) ? (": trained before (" + finished.string() +
                                         "), checking its settings and evaluating it again")
                                            .c_str()
                                      : "");
    const TrainOptions to = run_options(train, enc, seed, dir, opt.init_runs);
    done.emplace_back(i, fs::exists(finished) ? reuse_finished(to, *probe_data, r, tests)
                                              : train_and_evaluate(to, enc, seed, r, tests));
    // Partial results after every run: a long comparison can be looked at while it runs (with
    // several ranks, rank 0's runs so far; the whole table once they are gathered).
    if (comm.rank() == 0) {
      r.runs.clear();
      for (const auto& d : done) r.runs.push_back(d.second);
      r.wall_seconds = monotonic_seconds() - wall0;
      write_compare_outputs(r, opt.out);
    }
  }
  if (comm.size() > 1) {
    done = gather_runs(comm, done);
    if (comm.rank() != 0) {
      r.runs.clear();
      for (const auto& d : done) r.runs.push_back(d.second);
      return r;  // rank 0 writes the outputs
    }
  }
  std::sort(done.begin(), done.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (done.size() != all.size()) {
    throw std::logic_error("compare: gathered " + std::to_string(done.size()) + " runs of " +
                           std::to_string(all.size()));
  }
  r.runs.clear();
  for (const auto& d : done) r.runs.push_back(d.second);
  if (opt.pictures) add_pictures(r, base, opt.out);
  r.wall_seconds = monotonic_seconds() - wall0;
  write_compare_outputs(r, opt.out);
  return r;
}

void write_compare_outputs(const CompareResults& r, const std::string& out) {
  fs::create_directories(out);
  write_file_atomic((fs::path(out) / "results.json").string(), results_json(r));
  write_file_atomic((fs::path(out) / "results.csv").string(), results_csv(r));
  write_file_atomic((fs::path(out) / "report.html").string(), report_html(r));
}

}  // namespace vitpe
