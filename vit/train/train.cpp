// The training loop, evaluation, progress bar and run-directory files (see train.h).
#include "vit/train/train.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "ops/files.h"
#include "ops/ops.h"
#include "ops/util.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"
#include "vit/train/loader.h"
#include "vit/train/optim.h"

namespace vitpe {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- progress bar
// --------------------------------------------------------------------------------

Progress::Progress(std::string label, int64_t total, FILE* out, bool enabled)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      out_(out),
      enabled_(enabled),
      tty_(out && isatty(fileno(out))),
      start_(monotonic_seconds()) {}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  }
  return buf;
}

std::string Progress::line(int64_t done, const std::string& text, double rate,
                           double elapsed) const {
  constexpr int kWidth = 24;
  const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(kWidth, ' ');
  for (int i = 0; i < fill; ++i) bar[i] = '=';
  if (fill < kWidth) bar[fill] = '>';
  const double eta = done > 0 ? elapsed * (static_cast<double>(total_ - done) / done) : 0.0;
  char buf[96];
  std::snprintf(buf, sizeof buf, "] %3d%% %lld/%lld ", static_cast<int>(frac * 100 + 1e-9),
                static_cast<long long>(done), static_cast<long long>(total_));
  std::string s = label_ + " [" + bar + buf + text;
  std::snprintf(buf, sizeof buf, " %.0f img/s %s %s", rate, done >= total_ ? "took" : "ETA",
                format_duration(done >= total_ ? elapsed : eta).c_str());
  return s + buf;
}

void Progress::update(int64_t done, const std::string& text, double rate) {
  if (!enabled_ || !out_) return;
  const double t = monotonic_seconds();
  if (tty_) {
    if (last_draw_ >= 0 && t - last_draw_ < 0.1) return;
    last_draw_ = t;
    std::fprintf(out_, "\r%s\033[K", line(done, text, rate, t - start_).c_str());
    std::fflush(out_);
  } else {
    const int decile = static_cast<int>(10 * done / total_);
    if (decile <= last_decile_ || decile >= 10) return;  // 100% is printed by finish()
    last_decile_ = decile;
    if (decile == 0) return;
    std::fprintf(out_, "%s\n", line(done, text, rate, t - start_).c_str());
  }
}

void Progress::finish(const std::string& text, double rate) {
  if (!enabled_ || !out_) return;
  const std::string l = line(total_, text, rate, monotonic_seconds() - start_);
  std::fprintf(out_, tty_ ? "\r%s\033[K\n" : "%s\n", l.c_str());
  std::fflush(out_);
}

// ---- evaluation
// ----------------------------------------------------------------------------------

namespace {

// Counts rows of logits [B, C] whose argmax equals the label (first maximum wins).
int64_t count_correct(const Tensor& logits, const std::vector<int32_t>& labels) {
  const int64_t B = logits.size(0), C = logits.size(1);
  const float* p = logits.f32();
  int64_t correct = 0;
  for (int64_t b = 0; b < B; ++b) {
    const float* row = p + b * C;
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == labels[b];
  }
  return correct;
}

}  // namespace

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch, bool progress,
                    const std::string& label) {
  LoaderOptions lo;
  lo.batch = batch;
  lo.shuffle = false;
  lo.drop_last = false;
  Loader loader(data, lo);
  loader.start_epoch(0);
  Progress bar(label, loader.batches_per_epoch(), stderr, progress);
  Tensor images, probs;
  std::vector<int32_t> labels;
  double loss_sum = 0;
  int64_t correct = 0, count = 0, done = 0;
  const double t0 = monotonic_seconds();
  char text[64];
  while (loader.next(images, labels)) {
    const Tensor& logits = model.forward(images, false);
    if (!probs.defined() || probs.shape() != logits.shape()) probs = Tensor::empty(logits.shape());
    const auto B = static_cast<int64_t>(labels.size());
    loss_sum += cross_entropy_forward(probs, logits, labels.data(), 0.0f) * static_cast<double>(B);
    correct += count_correct(logits, labels);
    count += B;
    ++done;
    std::snprintf(text, sizeof text, "acc %.2f%%", 100.0 * correct / count);
    bar.update(done, text, count / std::max(1e-9, monotonic_seconds() - t0));
  }
  EvalResult r;
  r.count = count;
  r.loss = count ? loss_sum / count : 0;
  r.accuracy = count ? static_cast<double>(correct) / count : 0;
  r.seconds = monotonic_seconds() - t0;
  std::snprintf(text, sizeof text, "acc %.2f%%", 100.0 * r.accuracy);
  bar.finish(text, count / std::max(1e-9, r.seconds));
  return r;
}

// ---- configuration
// -------------------------------------------------------------------------------

ModelConfig apply_overrides(const ModelConfig& config, const std::vector<std::string>& overrides) {
  if (overrides.empty()) return config;
  json j = json::parse(config.to_json());
  for (const std::string& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument("model override '" + o + "': expected key=value (e.g. depth=2)");
    }
    const std::string key = o.substr(0, eq), value = o.substr(eq + 1);
    if (!j.contains(key)) {
      std::string keys;
      for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
      throw std::invalid_argument("model override '" + o + "': unknown key '" + key +
                                  "' (keys: " + keys + ")");
    }
    json v = json::parse(value, nullptr, false);
    j[key] = v.is_discarded() ? json(value) : v;
  }
  ModelConfig c = ModelConfig::from_json(j.dump());
  return c;
}

ModelConfig make_train_config(const TrainOptions& o, const Dataset& d) {
  ModelConfig c = preset(o.model);
  if (!o.encoding.empty()) c.encoding = o.encoding;
  c = apply_overrides(c, o.overrides);
  c.img_rows = d.rows();
  c.img_cols = d.cols();
  c.channels = d.channels();
  c.classes = d.classes();
  c.labels = d.labels();
  c.mean = d.mean();
  c.std_dev = d.std_dev();
  c.validate();
  return c;
}

// ---- training ----------------------------------------------------------------------------------

namespace {

json record_json(const EpochRecord& r) {
  return {{"type", "epoch"},
          {"epoch", r.epoch},
          {"step", r.step},
          {"lr", r.lr},
          {"train_loss", r.train_loss},
          {"train_acc", r.train_acc},
          {"test_loss", r.test_loss},
          {"test_acc", r.test_acc},
          {"seconds", r.seconds},
          {"img_per_s", r.img_per_s}};
}

EpochRecord record_from_json(const json& j) {
  EpochRecord r;
  r.epoch = j.at("epoch");
  r.step = j.at("step");
  r.lr = j.at("lr");
  r.train_loss = j.at("train_loss");
  r.train_acc = j.at("train_acc");
  r.test_loss = j.at("test_loss");
  r.test_acc = j.at("test_acc");
  r.seconds = j.at("seconds");
  r.img_per_s = j.at("img_per_s");
  return r;
}

// What must match between a run and its resumption.
json run_fingerprint(const TrainOptions& o, const ModelConfig& c) {
  json j = {{"config", json::parse(c.to_json())},
            {"dataset", o.data.name},
            {"train_limit", o.data.limit},
            {"test_limit", o.test_limit},
            {"data_seed", o.data.seed},
            {"epochs", o.epochs},
            {"batch", o.batch},
            {"lr", o.lr},
            {"min_lr", o.min_lr},
            {"warmup_epochs", o.warmup_epochs},
            {"weight_decay", o.weight_decay},
            {"smoothing", o.smoothing},
            {"clip", o.clip},
            {"augment", o.augment},
            {"seed", o.seed}};
  // Only recorded when off, so runs started before the option existed still resume.
  if (o.augment && !o.flip) j["flip"] = false;
  return j;
}

void append_line(const std::string& path, const json& j) {
  std::ofstream f(path, std::ios::app);
  if (!f) throw std::runtime_error(path + ": cannot open for appending");
  f << j.dump() << '\n';
}

// Keeps the metric lines of epochs <= `epoch` (drops what a killed run wrote after its last
// checkpoint), so a resumed run's metrics equal an uninterrupted run's.
void truncate_metrics(const std::string& path, int64_t epoch) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("epoch")) continue;
    if (j["epoch"].get<int64_t>() <= epoch) kept += line + '\n';
  }
  in.close();
  write_file_atomic(path, kept);
}

}  // namespace

TrainResult train(const TrainOptions& o) {
  if (o.epochs <= 0) throw std::invalid_argument("train: epochs must be positive");
  if (o.batch <= 0) throw std::invalid_argument("train: batch must be positive");

  // ---- data
  DatasetOptions train_opt = o.data;
  train_opt.train = true;
  std::unique_ptr<Dataset> train_data = make_dataset(train_opt);
  DatasetOptions test_opt = o.data;
  test_opt.train = false;
  test_opt.limit = o.test_limit;
  std::unique_ptr<Dataset> test_data = make_dataset(test_opt);
  if (train_data->size() < o.batch) {
    throw std::invalid_argument("train: the training set has " +
                                std::to_string(train_data->size()) +
                                " samples, fewer than one batch of " + std::to_string(o.batch));
  }

  // ---- model, optimizer, schedule
  TrainResult result;
  result.config = make_train_config(o, *train_data);
  result.model = make_model(result.config, o.seed);
  Model& model = *result.model;
  std::vector<Param*> params = model.params();
  result.params = model.num_params();
  AdamWOptions ao;
  ao.weight_decay = static_cast<float>(o.weight_decay);
  AdamW opt(params, ao);

  LoaderOptions lo;
  lo.batch = o.batch;
  lo.augment = o.augment;
  lo.flip = o.flip;
  lo.seed = mix_seed(o.seed, 0x64617461ull);
  Loader loader(*train_data, lo);
  const int64_t per_epoch = loader.batches_per_epoch();
  Schedule sched;
  sched.base_lr = o.lr;
  sched.min_lr = std::min(o.min_lr, o.lr);
  sched.warmup = static_cast<int64_t>(std::llround(o.warmup_epochs * per_epoch));
  sched.total = o.epochs * per_epoch;

  // ---- run directory and resume
  const json fingerprint = run_fingerprint(o, result.config);
  std::string metrics_path, last_path;
  int64_t start_epoch = 0, step = 0;
  if (!o.out.empty()) {
    fs::create_directories(o.out);
    metrics_path = (fs::path(o.out) / "metrics.jsonl").string();
    last_path = (fs::path(o.out) / "last.safetensors").string();
    if (o.resume && fs::exists(last_path)) {
      SafeTensorsFile f = SafeTensorsFile::open(last_path);
      auto it = f.metadata().find("vitpe.train");
      if (it == f.metadata().end()) {
        throw std::runtime_error(last_path +
                                 ": no \"vitpe.train\" metadata (not a checkpoint "
                                 "written by `vitpe train`)");
      }
      json st = json::parse(it->second);
      if (st.at("fingerprint") != fingerprint) {
        std::string diff;
        for (const auto& [k, v] : fingerprint.items()) {
          if (!st["fingerprint"].contains(k) || st["fingerprint"][k] != v) {
            diff += (diff.empty() ? "" : ", ") + k + " (run: " + st["fingerprint"][k].dump() +
                    ", now: " + v.dump() + ")";
          }
        }
        throw std::runtime_error(last_path + ": --resume with different settings: " + diff);
      }
      std::map<std::string, Tensor> weights;
      std::vector<std::pair<std::string, Tensor>> optim_state;
      for (const std::string& name : f.names()) {
        if (name.rfind("optim.", 0) == 0) {
          optim_state.emplace_back(name.substr(6), f.get(name));
        } else {
          weights[name] = f.get(name);
        }
      }
      load_params(model, weights, last_path);
      start_epoch = st.at("epoch");
      step = st.at("step");
      opt.load_state(optim_state, step);
      result.train_seconds = st.at("train_seconds");
      result.best_test_acc = st.at("best_test_acc");
      for (const json& r : st.at("history")) result.history.push_back(record_from_json(r));
      truncate_metrics(metrics_path, start_epoch);
      if (o.verbose) {
        std::fprintf(stderr, "resuming %s at epoch %lld/%lld (step %lld)\n", o.out.c_str(),
                     static_cast<long long>(start_epoch + 1), static_cast<long long>(o.epochs),
                     static_cast<long long>(step));
      }
    } else if (fs::exists(metrics_path)) {
      fs::remove(metrics_path);  // a fresh run in an old directory starts a fresh log
    }
  }

  // ---- the loop
  Tensor images, probs, dlogits;
  std::vector<int32_t> labels;
  int64_t epochs_this_run = 0;
  for (int64_t epoch = start_epoch; epoch < o.epochs; ++epoch) {
    const double t0 = monotonic_seconds();
    loader.start_epoch(epoch);
    char head[64];
    std::snprintf(head, sizeof head, "epoch %lld/%lld", static_cast<long long>(epoch + 1),
                  static_cast<long long>(o.epochs));
    Progress bar(head, per_epoch, stderr, o.progress);
    double loss_sum = 0, loss_window = 0;
    int64_t correct = 0, seen = 0, in_window = 0, batches = 0;
    double lr = 0;
    char text[96];
    while (loader.next(images, labels)) {
      lr = sched.at(step);
      const auto B = static_cast<int64_t>(labels.size());
      const Tensor& logits = model.forward(images, true);
      if (!probs.defined() || probs.shape() != logits.shape()) {
        probs = Tensor::empty(logits.shape());
        dlogits = Tensor::empty(logits.shape());
      }
      const float loss = cross_entropy_forward(probs, logits, labels.data(), o.smoothing);
      if (!std::isfinite(loss)) {
        throw std::runtime_error("train: the loss became " + std::to_string(loss) + " at step " +
                                 std::to_string(step) + " (lower --lr or set --clip)");
      }
      correct += count_correct(logits, labels);
      dlogits.zero();
      cross_entropy_backward(dlogits, probs, labels.data(), o.smoothing);
      model.zero_grad();
      model.backward(dlogits);
      clip_grad_norm(params, o.clip);
      opt.step(static_cast<float>(lr));
      ++step;
      ++batches;
      seen += B;
      loss_sum += loss;
      loss_window += loss;
      ++in_window;
      if (!metrics_path.empty() && o.log_every > 0 && step % o.log_every == 0) {
        append_line(metrics_path, {{"type", "step"},
                                   {"epoch", epoch + 1},
                                   {"step", step},
                                   {"lr", lr},
                                   {"loss", loss_window / in_window}});
        loss_window = 0;
        in_window = 0;
      }
      std::snprintf(text, sizeof text, "loss %.4f acc %.2f%%", loss_sum / batches,
                    100.0 * correct / seen);
      bar.update(batches, text, seen / std::max(1e-9, monotonic_seconds() - t0));
    }
    const double train_time = monotonic_seconds() - t0;
    bar.finish(text, seen / std::max(1e-9, train_time));

    EvalResult ev = evaluate(model, *test_data, o.eval_batch, o.progress, "  test");
    EpochRecord rec;
    rec.epoch = epoch + 1;
    rec.step = step;
    rec.lr = lr;
    rec.train_loss = batches ? loss_sum / batches : 0;
    rec.train_acc = seen ? static_cast<double>(correct) / seen : 0;
    rec.test_loss = ev.loss;
    rec.test_acc = ev.accuracy;
    rec.seconds = monotonic_seconds() - t0;
    rec.img_per_s = seen / std::max(1e-9, train_time);
    result.history.push_back(rec);
    result.train_seconds += rec.seconds;
    const bool best = ev.accuracy > result.best_test_acc || epoch == 0;
    if (best) result.best_test_acc = std::max(result.best_test_acc, ev.accuracy);
    if (o.verbose) {
      std::fprintf(stderr,
                   "epoch %lld/%lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | "
                   "%.0f img/s, %s%s\n",
                   static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs),
                   rec.train_loss, 100 * rec.train_acc, rec.test_loss, 100 * rec.test_acc,
                   rec.img_per_s, Progress::format_duration(rec.seconds).c_str(),
                   best ? " (best)" : "");
    }

    if (!o.out.empty()) {
      append_line(metrics_path, record_json(rec));
      std::map<std::string, std::string> meta;
      meta["vitpe.config"] = model.config().to_json();
      meta["format"] = "pt";
      json hist = json::array();
      for (const EpochRecord& r : result.history) hist.push_back(record_json(r));
      meta["vitpe.train"] = json{
          {"epoch", epoch + 1},
          {"step", step},
          {"train_seconds", result.train_seconds},
          {"best_test_acc", result.best_test_acc},
          {"history", hist},
          {"fingerprint",
           fingerprint}}.dump();
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (Param* p : params) tensors.emplace_back(p->name, p->value);
      for (auto& [name, t] : opt.state()) tensors.emplace_back("optim." + name, t);
      // Weights first, the resume point last: a kill between the writes loses nothing.
      save_model(model, (fs::path(o.out) / "model.safetensors").string());
      if (best) save_model(model, (fs::path(o.out) / "best.safetensors").string());
      save_safetensors(last_path, tensors, meta);
    }
    ++epochs_this_run;
    if (o.stop_after_epochs > 0 && epochs_this_run >= o.stop_after_epochs && epoch + 1 < o.epochs) {
      return result;
    }
  }
  result.finished = true;
  return result;
}

}  // namespace vitpe
