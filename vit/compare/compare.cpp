// The comparison driver (see compare.h).
#include "vit/compare/compare.h"

#include <dnnl.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <opencv2/core/version.hpp>
#include <sstream>
#include <stdexcept>

#include "ops/files.h"
#include "ops/ops.h"
#include "ops/util.h"
#include "vit/compare/compare_pictures.h"
#include "vit/io/checkpoint.h"
#include "vitpe_version.h"

namespace vitpe {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> default_encodings(ModelKind kind) {
  return default_study_encodings(kind == ModelKind::swin ? AttentionLayout::windowed
                                                         : AttentionLayout::global);
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

}  // namespace

CompareResults run_compare(const CompareOptions& opt) {
  if (opt.out.empty()) throw std::invalid_argument("compare: an output directory is required");
  if (opt.seeds.empty()) throw std::invalid_argument("compare: at least one seed is required");
  fs::create_directories(opt.out);
  const auto wall0 = std::chrono::steady_clock::now();

  // Geometry and the model family come from the training set and the preset.
  DatasetOptions probe = opt.train.data;
  probe.limit = 1;
  std::unique_ptr<Dataset> probe_data = make_dataset(probe);
  ModelConfig base = make_train_config(opt.train, *probe_data);

  CompareResults r;
  r.encodings = opt.encodings.empty() ? default_encodings(base.kind) : opt.encodings;
  r.seeds = opt.seeds;
  r.train_size = base.img_rows;
  r.sizes = opt.sizes;
  if (r.sizes.empty()) {
    // At least 8 px and a whole number of patches.
    const int64_t step = base.patch * ((8 + base.patch - 1) / base.patch);
    r.sizes = {r.train_size, r.train_size + step, r.train_size + 2 * step};
  }
  // Fail before hours of training, not after: every evaluation size must hold whole patches.
  for (int64_t size : r.sizes) {
    if (size <= 0 || size % base.patch != 0) {
      const int64_t step = base.patch * ((8 + base.patch - 1) / base.patch);
      throw std::invalid_argument(
          "compare: evaluation size " + std::to_string(size) +
          " is not a positive multiple of the patch size " + std::to_string(base.patch) +
          " of this model; for example --eval-sizes " + std::to_string(r.train_size) + "," +
          std::to_string(r.train_size + step) + "," + std::to_string(r.train_size + 2 * step));
    }
  }
  r.title = "Positional encodings compared: " + base.name + " on " + probe_data->name();

  ModelConfig none_cfg = base;
  none_cfg.encoding = "none";

  const TrainOptions& t = opt.train;
  r.settings = {
      {"model", t.model},
      {"model config (none)", none_cfg.to_json()},
      {"overrides", join(t.overrides, ",")},
      {"encodings", join(r.encodings, ",")},
      {"dataset", t.data.name},
      {"data dir", t.data.dir.empty() ? "(default)" : t.data.dir},
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
      {"augmentation", !t.augment ? "off"
                       : t.flip   ? "random crop + flips where the label allows"
                                  : "random crop, no flips"},
      {"data seed (procedural)", std::to_string(t.data.seed)}};
  std::string seeds, sizes;
  for (uint64_t s : r.seeds) seeds += (seeds.empty() ? "" : ",") + std::to_string(s);
  for (int64_t s : r.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  r.settings.emplace_back("seeds", seeds);
  r.settings.emplace_back("evaluation sizes", sizes);
  r.settings.emplace_back("evaluation at other sizes", probe_data->other_size_rule());
  for (const auto& kv : opt.extra_settings) r.settings.push_back(kv);
  r.versions = version_info();

  // Test sets at each evaluation size (shared by all runs).
  std::vector<std::unique_ptr<Dataset>> tests;
  for (int64_t s : r.sizes) {
    DatasetOptions d = t.data;
    d.train = false;
    d.limit = t.test_limit;
    d.rows = d.cols = s;
    tests.push_back(make_dataset(d));
  }

  const size_t total = r.encodings.size() * r.seeds.size();
  size_t k = 0;
  for (const std::string& enc : r.encodings) {
    for (uint64_t seed : r.seeds) {
      ++k;
      const fs::path dir = fs::path(opt.out) / "runs" / (enc + "-s" + std::to_string(seed));
      const fs::path result_path = dir / "result.json";
      if (fs::exists(result_path)) {
        std::ifstream f(result_path);
        std::stringstream ss;
        ss << f.rdbuf();
        r.runs.push_back(run_from_json(json::parse(ss.str())));
        std::fprintf(stderr, "[%zu/%zu] %s seed %llu: done before, reusing %s\n", k, total,
                     enc.c_str(), static_cast<unsigned long long>(seed),
                     result_path.string().c_str());
        continue;
      }
      std::fprintf(stderr, "[%zu/%zu] %s seed %llu\n", k, total, enc.c_str(),
                   static_cast<unsigned long long>(seed));
      TrainOptions to = t;
      to.encoding = enc;
      to.seed = seed;
      to.out = dir.string();
      to.resume = true;
      TrainResult tr = train(to);
      if (!tr.finished) throw std::runtime_error("compare: run " + dir.string() + " stopped early");
      RunResult run;
      run.encoding = enc;
      run.seed = seed;
      run.params = tr.params;
      run.params_added = tr.model->num_encoding_params();
      run.train_seconds = tr.train_seconds;
      run.history = tr.history;
      for (size_t s = 0; s < r.sizes.size(); ++s) {
        EvalResult ev = evaluate(*tr.model, *tests[s], t.eval_batch, t.progress,
                                 "  @" + std::to_string(r.sizes[s]));
        run.accuracy.push_back(ev.accuracy);
        run.loss.push_back(ev.loss);
      }
      std::string accs;
      for (size_t s = 0; s < r.sizes.size(); ++s) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%s@%lld %.2f%%", s ? ", " : "",
                      static_cast<long long>(r.sizes[s]), 100 * run.accuracy[s]);
        accs += buf;
      }
      std::fprintf(stderr, "  %s seed %llu: %s\n", enc.c_str(),
                   static_cast<unsigned long long>(seed), accs.c_str());
      write_file_atomic(result_path.string(), run_to_json(run).dump(2) + "\n");
      r.runs.push_back(std::move(run));
      // Partial results after every run: a long comparison can be looked at while it runs.
      r.wall_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
      write_compare_outputs(r, opt.out);
    }
  }

  if (opt.pictures) {
    for (const std::string& enc : r.encodings) {
      ModelConfig c = base;
      c.encoding = enc;
      // The trained weights of the first seed, when its run directory has them.
      const fs::path weights = fs::path(opt.out) / "runs" /
                               (enc + "-s" + std::to_string(r.seeds[0])) / "model.safetensors";
      std::unique_ptr<Model> trained;
      if (fs::exists(weights)) trained = load_model(weights.string()).model;
      std::vector<Picture> pics;
      try {
        pics = encoding_pictures(c, trained.get(), (fs::path(opt.out) / "pictures").string());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pictures of %s: %s (left out of the report)\n", enc.c_str(),
                     e.what());
      }
      if (!pics.empty()) r.pictures.emplace_back(enc, std::move(pics));
    }
  }
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
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
