// The training loop, evaluation, progress bar and run-directory files (see train.h).
#include "vit/train/train.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "ops/adaptive_threads.h"
#include "ops/files.h"
#include "ops/ops.h"
#include "ops/util.h"
#include "vit/io/checkpoint.h"
#include "vit/models/family.h"
#include "vit/train/loader.h"
#include "vit/train/optim.h"
#include "vit/train/run_dir.h"

namespace vitpe {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- progress bar -------------------------------------------------------------------------------

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

// ---- evaluation ---------------------------------------------------------------------------------

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

namespace {

// Entries of the batch whose target is among the 5 highest of its row (ties counted against it).
int64_t count_top5(const Tensor& logits, const std::vector<int32_t>& targets) {
  const int64_t C = logits.size(1);
  int64_t hits = 0;
  for (size_t b = 0; b < targets.size(); ++b) {
    const float* row = logits.f32() + static_cast<int64_t>(b) * C;
    const float t = row[targets[b]];
    int64_t above = 0;
    for (int64_t j = 0; j < C; ++j) above += row[j] > t;
    hits += above < 5;
  }
  return hits;
}

}  // namespace

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch, bool progress,
                    const std::string& label, Communicator* comm, bool adaptive_threads,
                    const EvalLabels* remap) {
  // The same logits, hence loss and accuracy, on any thread count.
  const FixedWorkSplit fixed;
  AdaptiveThreads adaptive(adaptive_threads);
  Communicator& ranks = comm ? *comm : self();
  LoaderOptions lo;
  lo.batch = batch;
  lo.shuffle = false;
  lo.drop_last = false;
  lo.shard = ranks.rank();
  lo.shards = ranks.size();
  Loader loader(data, lo);
  loader.start_epoch(0);
  Progress bar(label, loader.batches_per_epoch(), stderr, progress);
  Tensor images, probs, scored;
  std::vector<int32_t> labels;
  double loss_sum = 0;
  int64_t correct = 0, top5 = 0, count = 0, done = 0;
  // With a class map or valid labels: the model class each dataset class is, and its column among
  // the scored logits.
  std::vector<int64_t> column_of_model_class;
  if (remap && !remap->valid.empty()) {
    column_of_model_class.assign(static_cast<size_t>(model.config().classes), -1);
    for (size_t j = 0; j < remap->valid.size(); ++j) {
      column_of_model_class[static_cast<size_t>(remap->valid[j])] = static_cast<int64_t>(j);
    }
  }
  const double t0 = monotonic_seconds();
  char text[64];
  if (data.size() == 0) {
    throw std::invalid_argument(label + ": the evaluation set (" + data.name() +
                                ") has no samples; an accuracy of nothing would read as 0 %");
  }
  while (loader.next(images, labels)) {
    const Tensor* out = nullptr;
    {
      AdaptiveThreads::Call call(adaptive, static_cast<uint64_t>(images.size(0)));
      out = &model.forward(images, false);
    }
    const Tensor* all = out;
    if (remap) {
      for (int32_t& l : labels) {
        const int64_t m =
            remap->model_class.empty() ? l : remap->model_class[static_cast<size_t>(l)];
        l = static_cast<int32_t>(
            column_of_model_class.empty() ? m : column_of_model_class[static_cast<size_t>(m)]);
      }
      if (!remap->valid.empty()) {
        const int64_t rows = out->size(0), C = out->size(1);
        const auto V = static_cast<int64_t>(remap->valid.size());
        if (!scored.defined() || scored.size(0) != rows) scored = Tensor::empty({rows, V});
        for (int64_t b = 0; b < rows; ++b) {
          for (int64_t j = 0; j < V; ++j) {
            scored.f32()[b * V + j] = out->f32()[b * C + remap->valid[static_cast<size_t>(j)]];
          }
        }
        all = &scored;
      }
    }
    const Tensor& logits = *all;
    if (!probs.defined() || probs.shape() != logits.shape()) probs = Tensor::empty(logits.shape());
    const auto B = static_cast<int64_t>(labels.size());
    const float loss = cross_entropy_forward(probs, logits, labels.data(), 0.0f);
    if (!std::isfinite(loss)) {
      throw std::runtime_error(label + ": the loss is " + std::to_string(loss) + " at batch " +
                               std::to_string(done + 1) +
                               " (the model's logits are not finite: NaN or Inf weights, or a bad "
                               "config such as a negative eps)");
    }
    loss_sum += loss * static_cast<double>(B);
    correct += count_correct(logits, labels);
    top5 += count_top5(logits, labels);
    count += B;
    ++done;
    std::snprintf(text, sizeof text, "acc %.2f%%", 100.0 * correct / count);
    bar.update(done, text, count / std::max(1e-9, monotonic_seconds() - t0));
  }
  if (ranks.size() > 1) {
    double totals[4] = {loss_sum, static_cast<double>(correct), static_cast<double>(count),
                        static_cast<double>(top5)};
    ranks.allreduce_sum(totals, 4);
    loss_sum = totals[0];
    correct = static_cast<int64_t>(totals[1]);
    count = static_cast<int64_t>(totals[2]);
    top5 = static_cast<int64_t>(totals[3]);
  }
  EvalResult r;
  r.count = count;
  r.loss = count ? loss_sum / count : 0;
  r.accuracy = count ? static_cast<double>(correct) / count : 0;
  r.top5 = count ? static_cast<double>(top5) / count : 0;
  r.seconds = monotonic_seconds() - t0;
  std::snprintf(text, sizeof text, "acc %.2f%%", 100.0 * r.accuracy);
  bar.finish(text, count / std::max(1e-9, r.seconds));
  return r;
}

// ---- epoch records as JSON ----------------------------------------------------------------------

json epoch_record_json(const EpochRecord& r) {
  return {{"epoch", r.epoch},
          {"step", r.step},
          {"lr", r.lr},
          {"train_loss", r.train_loss},
          {"train_acc", r.train_acc},
          {"test_loss", r.test_loss},
          {"test_acc", r.test_acc},
          {"seconds", r.seconds},
          {"img_per_s", r.img_per_s},
          {"ranks", r.ranks}};
}

EpochRecord epoch_record_from_json(const json& j) {
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
  r.ranks = j.value("ranks", int64_t{1});  // runs from before data-parallel training: alone
  return r;
}

// ---- configuration ------------------------------------------------------------------------------

namespace {
bool overridden(const std::vector<std::string>& overrides, const std::string& key) {
  for (const std::string& o : overrides) {
    if (o.rfind(key + "=", 0) == 0) return true;
  }
  return false;
}
}  // namespace

ModelConfig apply_overrides(const ModelConfig& config, const std::vector<std::string>& overrides) {
  if (overrides.empty()) return config;
  json j = json::parse(config.to_json());
  bool label_stale = false;
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
    if (v.is_discarded()) v = json(value);
    // The preset's label says what the preset is: another architecture is described anew.
    if (j[key] != v && key != "name" && key != "label" && key != "labels") label_stale = true;
    j[key] = v;
  }
  if (label_stale && !overridden(overrides, "label")) j["label"] = "";
  ModelConfig c = ModelConfig::from_json(j.dump());
  return c;
}

namespace {

LoadOptions init_load_options(const TrainOptions& o) {
  LoadOptions l;
  l.heads = o.init_heads;
  l.preset = o.init_preset;
  l.assume_defaults = o.init_assume_defaults;
  return l;
}

std::unique_ptr<Model> load_init(const TrainOptions& o) {
  try {
    return load_model(o.init, init_load_options(o)).model;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("train --init: ") + e.what());
  }
}

// With --init the file decides the architecture: a --set that changes any other field than the
// data's (size, classes, names, statistics, preprocessing), the encoding or the pooling is refused,
// naming every conflict at once, since init_from would otherwise start most of the model anew.
void check_init_overrides(const TrainOptions& o, const ModelConfig& file) {
  static const std::set<std::string> free_keys = {
      "name",     "label",    "labels",    "img_size",      "classes", "mean",
      "std",      "crop_pct", "crop_mode", "interpolation", "encoding", "pool"};
  const json before = json::parse(file.to_json());
  const json after = json::parse(apply_overrides(file, o.overrides).to_json());
  std::string conflicts;
  for (const auto& [key, value] : after.items()) {
    if (free_keys.count(key) || (before.contains(key) && before[key] == value)) continue;
    conflicts += "\n  --set " + key + "=" + value.dump() + " (the checkpoint's " +
                 (before.contains(key) ? before[key].dump() : std::string("none")) + ")";
  }
  if (!conflicts.empty()) {
    throw std::invalid_argument(
        "train --init " + o.init + ": the checkpoint's architecture conflicts with --set:" +
        conflicts +
        "\nThe file decides the architecture: drop these, or train a fresh model with --model");
  }
}

}  // namespace

ModelConfig make_train_config(const TrainOptions& o, const Dataset& d, const Model* init) {
  if (init) check_init_overrides(o, init->config());
  ModelConfig c = init ? init->config() : preset(o.model);
  if (init && c.channels != d.channels()) {
    throw std::invalid_argument("train --init " + o.init + ": the checkpoint's model takes " +
                                std::to_string(c.channels) + "-channel images, the dataset has " +
                                std::to_string(d.channels()) + " channels");
  }
  if (!o.encoding.empty()) c.encoding = o.encoding;
  c = apply_overrides(c, o.overrides);
  c.img_rows = d.rows();
  c.img_cols = d.cols();
  c.channels = d.channels();
  c.classes = d.classes();
  c.labels = d.labels();
  c.preprocess.mean = d.mean();
  c.preprocess.std_dev = d.std_dev();
  if (init && !o.encoding.empty() && c.encoding != init->config().encoding) c.label.clear();
  c.validate();
  return c;
}

ModelConfig train_config(const TrainOptions& o, const Dataset& d) {
  const std::unique_ptr<Model> init = o.init.empty() ? nullptr : load_init(o);
  return make_train_config(o, d, init.get());
}

bool is_image_folder(const DatasetOptions& d) {
  return d.name == "folder" || d.name.rfind("folder:", 0) == 0;
}

void use_model_transform(TrainOptions& o, const Model* init) {
  if (!is_image_folder(o.data) || o.data.transform) return;
  std::unique_ptr<Model> loaded;
  if (!init && !o.init.empty()) {
    loaded = load_init(o);
    init = loaded.get();
  }
  const ModelConfig base = apply_overrides(init ? init->config() : preset(o.model), o.overrides);
  Preprocess t = Preprocess::from(base);
  if (o.data.rows > 0) {
    t.rows = static_cast<int>(o.data.rows);
    t.cols = static_cast<int>(o.data.cols > 0 ? o.data.cols : o.data.rows);
  }
  t.validate();
  o.data.transform = t;
  if (o.augment) {
    if (!o.data.random_crop) o.data.random_crop = RandomResizedCrop{};
  } else {
    o.data.random_crop.reset();
  }
}

std::string folder_transform_text(const TrainOptions& o) {
  const DatasetOptions& d = o.data;
  if (!d.transform) return "";
  auto join_floats = [](const std::vector<float>& v) {
    std::string s;
    char one[32];
    for (float x : v) {
      std::snprintf(one, sizeof one, s.empty() ? "%.4g" : ",%.4g", x);
      s += one;
    }
    return s;
  };
  const Preprocess& t = *d.transform;
  std::ostringstream s;
  s << "image folder at " << t.rows << "x" << t.cols << ", "
    << (t.channels == 1 ? "grayscale (L)" : "RGB") << ", mean " << join_floats(t.mean)
    << " std " << join_floats(t.std_dev) << ", " << interpolation_name(t.interpolation)
    << " (the model's preprocessing)\n  train: "
    << (d.random_crop ? d.random_crop->text() + (o.flip ? " and a horizontal flip" : ", no flip")
                      : "no augmentation")
    << "\n  test: resize to size / crop_pct " << t.crop_pct << " ("
    << crop_mode_name(t.crop_mode) << ")" << (t.crop_mode == CropMode::center ? ", centre crop" : "")
    << "\n";
  return s.str();
}

std::string file_fingerprint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error(path + ": cannot be read");
  uint64_t h = 0xcbf29ce484222325ull;
  std::vector<unsigned char> buf(1 << 20);
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) {
    for (size_t i = 0; i < n; ++i) h = (h ^ buf[i]) * 0x100000001b3ull;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw std::runtime_error(path + ": read error");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

InitReport init_from(Model& model, Model& source) {
  const ModelConfig& to = model.config();
  const ModelConfig& from = source.config();
  const Grid grid{to.img_rows / to.patch, to.img_cols / to.patch};
  const Grid old_grid{from.img_rows / from.patch, from.img_cols / from.patch};
  std::map<std::string, Shape> before;
  for (Param* p : source.params()) before[p->name] = p->value.shape();
  if (grid != old_grid) {
    Model::EncodingParts parts = source.encoding_parts();
    if (parts.token) parts.token->resample(grid);
    // Global attention (ViT) sees the whole grid; windowed models (Swin) keep their windows.
    if (family_of(from).layout == AttentionLayout::global) {
      for (AttentionEncoding* a : parts.attention) {
        if (a) a->resample(grid);
      }
    }
  }
  std::map<std::string, Param*> src;
  for (Param* p : source.params()) src[p->name] = p;
  InitReport r;
  for (Param* p : model.params()) {
    auto it = src.find(p->name);
    if (it == src.end()) {
      r.fresh.push_back(p->name);
      r.fresh_why.push_back("not in the checkpoint");
      continue;
    }
    const Tensor& v = it->second->value;
    if (v.shape() != p->value.shape()) {
      r.fresh.push_back(p->name);
      r.fresh_why.push_back("the checkpoint's is " + v.shape().str() + ", the model's " +
                            p->value.shape().str());
    } else {
      std::memcpy(p->value.f32(), v.f32(), static_cast<size_t>(v.numel()) * sizeof(float));
      (before.at(p->name) == v.shape() ? r.loaded : r.resampled).push_back(p->name);
    }
    src.erase(it);
  }
  for (const auto& [name, p] : src) r.dropped.push_back(name);
  return r;
}

std::string init_report_text(const InitReport& r, const std::string& file) {
  auto list = [](const std::vector<std::string>& names, size_t most) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > most) s += ", ... (" + std::to_string(names.size() - most) + " more)";
    return s;
  };
  std::string s = "init from " + file + ": " + std::to_string(r.loaded.size()) +
                  " tensors loaded, " + std::to_string(r.resampled.size()) + " resampled, " +
                  std::to_string(r.fresh.size()) + " new, " + std::to_string(r.dropped.size()) +
                  " dropped\n";
  if (!r.resampled.empty()) s += "  resampled to the new grid: " + list(r.resampled, 8) + "\n";
  for (size_t i = 0; i < r.fresh.size() && i < 12; ++i) {
    s += "  new: " + r.fresh[i] + " (" + r.fresh_why[i] + ")\n";
  }
  if (r.fresh.size() > 12) s += "  new: ... (" + std::to_string(r.fresh.size() - 12) + " more)\n";
  if (!r.dropped.empty()) s += "  dropped from the checkpoint: " + list(r.dropped, 12) + "\n";
  return s;
}

// ---- training ----------------------------------------------------------------------------------

namespace {

struct Splits {
  std::unique_ptr<Dataset> train, test;
};

// o.data already carries the model's transform where the data is an image folder
// (use_model_transform).
Splits open_splits(const TrainOptions& o) {
  DatasetOptions train_opt = o.data;
  train_opt.train = true;
  DatasetOptions test_opt = o.data;
  test_opt.train = false;
  test_opt.limit = o.test_limit;
  Splits s{make_dataset(train_opt), make_dataset(test_opt)};
  check_split_classes(*s.train, *s.test,
                      o.data.name + (o.data.dir.empty() ? "" : " at " + o.data.dir));
  if (s.train->size() < o.batch) {
    throw std::invalid_argument("train: the training set has " + std::to_string(s.train->size()) +
                                " samples, fewer than one batch of " + std::to_string(o.batch));
  }
  return s;
}

// What one epoch of steps leaves behind, before evaluation.
struct EpochTotals {
  double loss_sum = 0, lr = 0, seconds = 0;
  int64_t correct = 0, seen = 0, batches = 0;
};

// The tensors a training step reuses from batch to batch.
struct StepBuffers {
  explicit StepBuffers(bool adaptive_threads) : adaptive(adaptive_threads) {}
  Tensor images, probs, dlogits;
  std::vector<int32_t> labels;
  std::vector<float> flat;   // every gradient, end to end (data-parallel: one allreduce a step)
  AdaptiveThreads adaptive;  // TrainOptions::adaptive_threads: the steps' thread count
};

}  // namespace

// One allreduce of one flat buffer, packed and unpacked: 2 cores leave no spare core to overlap
// buckets with the backward, see docs/DISTRIBUTED.md.
void allreduce_gradients(Communicator& comm, const std::vector<Param*>& params,
                         std::vector<float>& flat) {
  size_t total = 0;
  for (const Param* p : params) total += static_cast<size_t>(p->grad.numel());
  flat.resize(total);
  size_t at = 0;
  for (const Param* p : params) {
    const auto n = static_cast<size_t>(p->grad.numel());
    std::memcpy(flat.data() + at, p->grad.f32(), n * sizeof(float));
    at += n;
  }
  comm.allreduce_sum(flat.data(), static_cast<int64_t>(total));
  at = 0;
  for (Param* p : params) {
    const auto n = static_cast<size_t>(p->grad.numel());
    std::memcpy(p->grad.f32(), flat.data() + at, n * sizeof(float));
    at += n;
  }
}

namespace {

// What one step reports: the loss and correct count of the whole (global) batch.
struct StepStats {
  double loss = 0;
  int64_t correct = 0, seen = 0;
};

// Hands a training step's augmentation seed to the model's encoding parts (rope-dinov3's
// coordinate augmentation draws from it) and takes it back when the step ends, an exception
// included, so that evaluation never sees it. The seed is a pure function of the run's seed and
// the step: a resumed run, and every rank of a data-parallel one, draws the same.
class AugmentationScope {
 public:
  AugmentationScope(Model& model, uint64_t seed, int64_t step) : parts_(model.encoding_parts()) {
    // Rng seeds through SplitMix64: neighbouring steps get unrelated streams.
    Rng mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step));
    set(mix.next());
  }
  ~AugmentationScope() { set(std::nullopt); }
  AugmentationScope(const AugmentationScope&) = delete;
  AugmentationScope& operator=(const AugmentationScope&) = delete;

 private:
  void set(std::optional<uint64_t> s) {
    if (parts_.token) parts_.token->set_augmentation(s);
    for (AttentionEncoding* a : parts_.attention)
      if (a) a->set_augmentation(s);  // null: a block without an attention part
  }
  Model::EncodingParts parts_;
};

// One optimizer step on the loader's next batch (forward, loss, backward, clip, AdamW);
// false when the epoch has no batch left. Data-parallel: the loader gives this rank its part of
// the batch, whose loss is scaled by its share so that the summed gradients are the gradient of
// the whole batch's mean loss.
bool train_step(Model& model, AdamW& opt, Loader& loader, const std::vector<Param*>& params,
                const TrainOptions& o, Communicator& comm, double lr, int64_t step, StepBuffers& b,
                StepStats& stats) {
  if (!loader.next(b.images, b.labels)) return false;
  // Disabled (the default), this leaves the thread count as it is. Keyed by the batch's shape
  // (multi-resolution batches change the side too).
  AdaptiveThreads::Call call(b.adaptive, static_cast<uint64_t>(b.images.size(0)) << 16 |
                                             static_cast<uint64_t>(b.images.size(2)));
  const AugmentationScope augmentation(model, o.seed, step);
  const Tensor& logits = model.forward(b.images, true);
  if (!b.probs.defined() || b.probs.shape() != logits.shape()) {
    b.probs = Tensor::empty(logits.shape());
    b.dlogits = Tensor::empty(logits.shape());
  }
  const auto mine = static_cast<int64_t>(b.labels.size());
  const float loss = cross_entropy_forward(b.probs, logits, b.labels.data(), o.smoothing);
  double totals[3] = {static_cast<double>(loss) * static_cast<double>(mine),
                      static_cast<double>(count_correct(logits, b.labels)),
                      static_cast<double>(mine)};
  b.dlogits.zero();
  cross_entropy_backward(b.dlogits, b.probs, b.labels.data(), o.smoothing,
                         static_cast<float>(mine) / static_cast<float>(o.batch));
  model.zero_grad();
  model.backward(b.dlogits);
  if (comm.size() > 1) {
    allreduce_gradients(comm, params, b.flat);
    comm.allreduce_sum(totals, 3);
  }
  stats.loss = totals[0] / totals[2];
  stats.correct = static_cast<int64_t>(totals[1]);
  stats.seen = static_cast<int64_t>(totals[2]);
  // Every rank sees the same summed loss, so all of them stop here together.
  if (!std::isfinite(stats.loss)) {
    throw std::runtime_error("train: the loss became " + std::to_string(stats.loss) + " at step " +
                             std::to_string(step) + " (lower --lr or set --clip)");
  }
  clip_grad_norm(params, o.clip);
  opt.step(static_cast<float>(lr));
  return true;
}

// Every batch of one epoch, with a progress bar and step lines in the metrics log.
EpochTotals train_epoch(Model& model, AdamW& opt, Loader& loader, const Schedule& sched,
                        const TrainOptions& o, Communicator& comm, int64_t epoch, int64_t& step,
                        RunDirectory& run, StepBuffers& buffers) {
  // What the optimizer updates: a frozen parameter gets no gradient, no clipping, no exchange.
  const std::vector<Param*>& params = opt.params();
  const double t0 = monotonic_seconds();
  loader.start_epoch(epoch);
  char head[64];
  std::snprintf(head, sizeof head, "epoch %lld/%lld", static_cast<long long>(epoch + 1),
                static_cast<long long>(o.epochs));
  Progress bar(head, loader.batches_per_epoch(), stderr, o.progress);
  EpochTotals t;
  double loss_window = 0;
  int64_t in_window = 0;
  char text[96] = "";
  StepStats stats;
  for (double lr = sched.at(step);
       train_step(model, opt, loader, params, o, comm, lr, step, buffers, stats);
       lr = sched.at(step)) {
    t.lr = lr;
    ++step;
    ++t.batches;
    t.seen += stats.seen;
    t.correct += stats.correct;
    t.loss_sum += stats.loss;
    loss_window += stats.loss;
    ++in_window;
    if (o.log_every > 0 && step % o.log_every == 0) {
      run.log_step(epoch + 1, step, t.lr, loss_window / in_window);
      loss_window = 0;
      in_window = 0;
    }
    std::snprintf(text, sizeof text, "loss %.4f acc %.2f%%", t.loss_sum / t.batches,
                  100.0 * t.correct / t.seen);
    bar.update(t.batches, text, t.seen / std::max(1e-9, monotonic_seconds() - t0));
    if (o.on_progress) {
      TrainProgress p;
      p.epoch = epoch + 1;
      p.epochs = o.epochs;
      p.batch = t.batches;
      p.batches = loader.batches_per_epoch();
      p.step = step;
      p.loss = t.loss_sum / static_cast<double>(t.batches);
      p.accuracy = static_cast<double>(t.correct) / static_cast<double>(t.seen);
      p.encoding = o.encoding;
      p.seed = o.seed;
      o.on_progress(p);
    }
  }
  t.seconds = monotonic_seconds() - t0;
  bar.finish(text, t.seen / std::max(1e-9, t.seconds));
  return t;
}

EpochRecord epoch_record(int64_t epoch, int64_t step, const EpochTotals& t, const EvalResult& ev,
                         double seconds, int ranks) {
  EpochRecord rec;
  rec.ranks = ranks;
  rec.epoch = epoch + 1;
  rec.step = step;
  rec.lr = t.lr;
  rec.train_loss = t.batches ? t.loss_sum / t.batches : 0;
  rec.train_acc = t.seen ? static_cast<double>(t.correct) / t.seen : 0;
  rec.test_loss = ev.loss;
  rec.test_acc = ev.accuracy;
  rec.seconds = seconds;
  rec.img_per_s = t.seen / std::max(1e-9, t.seconds);
  return rec;
}

void print_epoch(const EpochRecord& rec, int64_t epochs, bool best) {
  std::fprintf(stderr,
               "epoch %lld/%lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | "
               "%.0f img/s, %s%s\n",
               static_cast<long long>(rec.epoch), static_cast<long long>(epochs), rec.train_loss,
               100 * rec.train_acc, rec.test_loss, 100 * rec.test_acc, rec.img_per_s,
               Progress::format_duration(rec.seconds).c_str(), best ? " (best)" : "");
}

Schedule make_schedule(const TrainOptions& o, int64_t per_epoch) {
  Schedule s;
  s.base_lr = o.lr;
  s.min_lr = std::min(o.min_lr, o.lr);
  s.warmup = static_cast<int64_t>(std::llround(o.warmup_epochs * per_epoch));
  s.total = o.epochs * per_epoch;
  return s;
}

// Multi-resolution batches: every size a whole number of patches that the model takes (one
// forward of a blank image each, before anything is written), else an error naming the size.
void check_train_sizes(Model& model, const TrainOptions& o) {
  const ModelConfig& c = model.config();
  for (int64_t s : o.train_sizes) {
    if (s < c.patch || s % c.patch != 0) {
      throw std::invalid_argument("train: --train-sizes " + std::to_string(s) +
                                  ": expected a positive multiple of the patch size " +
                                  std::to_string(c.patch));
    }
    try {
      model.forward(Tensor::zeros({1, c.channels, s, s}));
    } catch (const std::exception& e) {
      throw std::invalid_argument("train: --train-sizes " + std::to_string(s) +
                                  ": the model cannot take this size: " + e.what());
    }
  }
}

LoaderOptions loader_options(const TrainOptions& o) {
  LoaderOptions lo;
  lo.batch = o.batch;
  lo.augment = o.augment;
  lo.flip = o.flip;
  // An image folder crops its decoded photos itself (Dataset::augments_itself); other data is
  // cropped from the rendered sample.
  if (!is_image_folder(o.data)) lo.zoom = o.data.random_crop;
  lo.sizes = o.train_sizes;
  lo.seed = mix_seed(o.seed, 0x64617461ull);
  return lo;
}

// Data-parallel: rank 0 opened the run directory (a new run, or a resumed one); the others get
// its resume point, weights and optimizer state, so every rank starts from the same place.
void sync_from_root(Communicator& comm, Model& model, AdamW& opt, ResumePoint& at) {
  std::string text;
  if (comm.rank() == 0) {
    json j = {{"epoch", at.epoch},
              {"step", at.step},
              {"train_seconds", at.train_seconds},
              {"best_test_acc", at.best_test_acc},
              {"adam_steps", opt.steps()},
              {"history", json::array()}};
    for (const EpochRecord& r : at.history) j["history"].push_back(epoch_record_json(r));
    text = j.dump();
  }
  comm.broadcast(text, 0);
  const json j = json::parse(text);
  at.epoch = j.at("epoch");
  at.step = j.at("step");
  at.train_seconds = j.at("train_seconds");
  at.best_test_acc = j.at("best_test_acc");
  at.history.clear();
  for (const json& r : j.at("history")) at.history.push_back(epoch_record_from_json(r));
  for (Param* p : model.params()) comm.broadcast(p->value.f32(), p->value.numel(), 0);
  std::vector<std::pair<std::string, Tensor>> state;
  for (auto& [name, t] : opt.state()) {
    Tensor copy = Tensor::empty(t.shape());
    std::memcpy(copy.f32(), t.f32(), static_cast<size_t>(t.numel()) * sizeof(float));
    comm.broadcast(copy.f32(), copy.numel(), 0);
    state.emplace_back(name, std::move(copy));
  }
  opt.load_state(state, j.at("adam_steps").get<int64_t>());
}

}  // namespace

namespace {

// TrainOptions::freeze: nothing (-1), the head alone (kFreezeAllButHead), or N blocks (N >= 0).
constexpr int64_t kFreezeNothing = -1, kFreezeAllButHead = -2;

int64_t parse_freeze(const std::string& freeze) {
  if (freeze.empty()) return kFreezeNothing;
  if (freeze == "head") return kFreezeAllButHead;
  const bool digits = freeze.size() <= 9 && std::all_of(freeze.begin(), freeze.end(), [](char c) {
                        return c >= '0' && c <= '9';
                      });
  if (!digits) {
    throw std::invalid_argument("train: --freeze '" + printable(freeze) +
                                "': expected 'head' (train the head alone) or a number of blocks "
                                "N (freeze the embeddings and blocks 0..N-1)");
  }
  return std::stoll(freeze);
}

// The fine-tuning settings, before any data is read; --freeze's depth is checked on the model.
void check_recipe(const TrainOptions& o) {
  if (!(std::isfinite(o.layer_decay) && o.layer_decay > 0 && o.layer_decay <= 1)) {
    throw std::invalid_argument("train: --layer-decay must be in (0, 1] (1: off), found " +
                                std::to_string(o.layer_decay));
  }
  if (!(std::isfinite(o.head_lr) && o.head_lr >= 0)) {
    throw std::invalid_argument("train: --head-lr must be >= 0 (0: the --lr), found " +
                                std::to_string(o.head_lr));
  }
  parse_freeze(o.freeze);
}

}  // namespace

AdamW make_optimizer(Model& model, const TrainOptions& o) {
  check_recipe(o);
  const int64_t depth = model.blocks();
  Model::BackwardScope scope;
  const int64_t freeze = parse_freeze(o.freeze);
  if (freeze == kFreezeAllButHead) {
    scope.head_only = true;
  } else if (freeze > depth) {
    throw std::invalid_argument("train: --freeze " + o.freeze + " is past the depth of " +
                                model.config().name + " (" + std::to_string(depth) +
                                " blocks): expected 0.." + std::to_string(depth) + " or 'head'");
  } else if (freeze >= 0) {
    scope.from_layer = freeze + 1;  // the embeddings (layer 0) and blocks 0..N-1 (layers 1..N)
  }
  model.set_backward_scope(scope);
  // Each parameter's scale: layer_decay^(depth + 1 - its layer); the head's head_lr / lr.
  std::map<const Param*, float> scale;
  const std::vector<Param*> all = model.params();
  const std::vector<int64_t> layers = model.param_layers();
  for (size_t i = 0; i < all.size(); ++i) {
    scale[all[i]] =
        static_cast<float>(std::pow(o.layer_decay, static_cast<double>(depth + 1 - layers[i])));
  }
  if (o.head_lr > 0) {
    for (const Param* p : model.head_params()) scale[p] = static_cast<float>(o.head_lr / o.lr);
  }
  std::vector<Param*> trainable = model.trainable_params();
  std::vector<float> scales;
  for (const Param* p : trainable) scales.push_back(scale.at(p));
  AdamWOptions ao;
  ao.weight_decay = static_cast<float>(o.weight_decay);
  return AdamW(std::move(trainable), ao, std::move(scales));
}

// Every numeric setting finite and in range, before any data is read (a NaN warmup or a
// negative lr once trained and exited 0).
void check_options(const TrainOptions& o) {
  auto require = [](bool ok, const std::string& what, double found) {
    if (!ok) throw std::invalid_argument("train: " + what + ", found " + std::to_string(found));
  };
  require(o.epochs > 0, "epochs must be positive", static_cast<double>(o.epochs));
  require(o.batch > 0, "batch must be positive", static_cast<double>(o.batch));
  require(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number", o.lr);
  require(std::isfinite(o.min_lr) && o.min_lr >= 0, "--min-lr must be >= 0", o.min_lr);
  require(std::isfinite(o.warmup_epochs) && o.warmup_epochs >= 0 && o.warmup_epochs <= o.epochs,
          "--warmup must be between 0 and the number of epochs", o.warmup_epochs);
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "--wd must be >= 0",
          o.weight_decay);
  require(std::isfinite(o.smoothing) && o.smoothing >= 0 && o.smoothing < 1,
          "--smoothing must be in [0, 1)", o.smoothing);
  require(!std::isnan(o.clip), "--clip must be a number (<= 0: no clipping)", o.clip);
  require(o.eval_batch > 0, "the evaluation batch must be positive",
          static_cast<double>(o.eval_batch));
  check_recipe(o);
  if (o.data.random_crop) {
    if (!o.augment) {
      throw std::invalid_argument("train: --scale and --ratio with --no-augment: there is no "
                                  "random crop to shape (drop one or the other)");
    }
    o.data.random_crop->validate();
  }
  const int ranks = o.comm ? o.comm->size() : 1;
  if (o.batch < ranks) {
    throw std::invalid_argument("train: a batch of " + std::to_string(o.batch) +
                                " cannot be split over " + std::to_string(ranks) +
                                " data-parallel ranks (expected --batch >= the number of ranks)");
  }
}

TrainResult train(const TrainOptions& options) {
  check_options(options);
  // Every step the same bits on any thread count (and on every rank of a data-parallel run).
  const FixedWorkSplit fixed;
  Communicator& comm = options.comm ? *options.comm : self();
  const bool root = comm.rank() == 0;
  // Rank 0 alone writes the run directory and the progress; the others compute.
  TrainOptions o = options;
  if (!root) {
    o.out.clear();
    o.progress = o.verbose = false;
  }
  std::unique_ptr<Model> init = o.init.empty() ? nullptr : load_init(o);
  use_model_transform(o, init.get());
  if (o.verbose) std::fprintf(stderr, "%s", folder_transform_text(o).c_str());
  const Splits data = open_splits(o);

  TrainResult result;
  result.config = make_train_config(o, *data.train, init.get());
  result.model = make_model(result.config, o.seed);
  Model& model = *result.model;
  if (init) {
    const InitReport report = init_from(model, *init);
    if (o.verbose) std::fprintf(stderr, "%s", init_report_text(report, o.init).c_str());
    init.reset();
  }
  result.params = model.num_params();
  check_train_sizes(model, o);
  if (o.verbose && !o.train_sizes.empty()) {
    std::string sizes;
    for (int64_t side : o.train_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(side);
    std::fprintf(stderr, "multi-resolution batches: each at one of %s px (the test split at %lldx%lld)\n",
                 sizes.c_str(), static_cast<long long>(result.config.img_rows),
                 static_cast<long long>(result.config.img_cols));
  }
  AdamW opt = make_optimizer(model, o);
  LoaderOptions lo = loader_options(o);
  lo.shard = comm.rank();
  lo.shards = comm.size();
  Loader loader(*data.train, lo);
  const Schedule sched = make_schedule(o, loader.batches_per_epoch());

  RunDirectory run(o, result.config);
  ResumePoint at = run.open(model, opt, o.resume, o.force, [](const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());  // always: the run is not where it was
  });
  if (comm.size() > 1) {
    sync_from_root(comm, model, opt, at);
    if (o.verbose) {
      std::fprintf(stderr, "data-parallel over %d ranks: %lld of each batch of %lld per rank\n",
                   comm.size(), static_cast<long long>(o.batch / comm.size()),
                   static_cast<long long>(o.batch));
    }
  }
  if (at.epoch > 0 && o.verbose) {
    std::fprintf(stderr, "resuming %s at epoch %lld/%lld (step %lld)\n", o.out.c_str(),
                 static_cast<long long>(at.epoch + 1), static_cast<long long>(o.epochs),
                 static_cast<long long>(at.step));
  }

  StepBuffers buffers(o.adaptive_threads);
  for (int64_t epoch = at.epoch, this_run = 1; epoch < o.epochs; ++epoch, ++this_run) {
    const double t0 = monotonic_seconds();
    const EpochTotals totals =
        train_epoch(model, opt, loader, sched, o, comm, epoch, at.step, run, buffers);
    const EvalResult ev =
        evaluate(model, *data.test, o.eval_batch, o.progress, "  test", &comm, o.adaptive_threads);
    at.history.push_back(
        epoch_record(epoch, at.step, totals, ev, monotonic_seconds() - t0, comm.size()));
    at.epoch = epoch + 1;
    at.train_seconds += at.history.back().seconds;
    const bool best = ev.accuracy > at.best_test_acc || epoch == 0;
    if (best) at.best_test_acc = std::max(at.best_test_acc, ev.accuracy);
    if (o.verbose) print_epoch(at.history.back(), o.epochs, best);
    run.save_epoch(model, opt, at, best);
    if (o.on_progress) {
      TrainProgress p;
      p.epoch = epoch + 1;
      p.epochs = o.epochs;
      p.batch = p.batches = loader.batches_per_epoch();
      p.step = at.step;
      p.loss = at.history.back().train_loss;
      p.accuracy = at.history.back().train_acc;
      p.epoch_done = &at.history.back();
      p.encoding = o.encoding;
      p.seed = o.seed;
      o.on_progress(p);
    }
    if (o.stop_after_epochs > 0 && this_run >= o.stop_after_epochs && epoch + 1 < o.epochs) break;
  }
  result.history = at.history;
  result.train_seconds = at.train_seconds;
  result.best_test_acc = at.best_test_acc;
  result.finished = at.epoch == o.epochs;
  return result;
}

}  // namespace vitpe
