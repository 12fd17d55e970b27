// The run directory: fingerprint, metrics.jsonl, checkpoints and resume (see run_dir.h).
#include "vit/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ops/files.h"
#include "ops/util.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"

namespace vitpe {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// What must match between a run and its resumption.
json run_fingerprint(const TrainOptions& o, const ModelConfig& c) {
  json j = {{"config", json::parse(c.to_json())},
            {"dataset", utf8_safe(o.data.name)},  // "folder:PATH": bytes, JSON needs UTF-8
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
  if (o.adaptive_threads) j["adaptive_threads"] = true;  // the same: recorded only when on
  // An image folder's random-resized crop (its transform's other parts are the config's).
  if (o.data.random_crop) {
    const RandomResizedCrop& c = *o.data.random_crop;
    j["random_crop"] = {{"scale", {c.scale_min, c.scale_max}}, {"ratio", {c.ratio_min, c.ratio_max}}};
  }
  // Multi-resolution batches, only when used.
  if (!o.train_sizes.empty()) j["train_sizes"] = o.train_sizes;
  // The fine-tuning recipe, each only when used (the optimizer's state depends on all three).
  if (o.layer_decay != 1.0) j["layer_decay"] = o.layer_decay;
  if (!o.freeze.empty()) j["freeze"] = o.freeze;
  if (o.head_lr > 0) j["head_lr"] = o.head_lr;
  // The checkpoint a fine-tuning run started from: its path and its bytes' hash, so a resumption
  // (or compare's reuse) from another file is refused.
  if (!o.init.empty()) {
    j["init"] = {{"file", utf8_safe(o.init)}, {"fnv1a64", file_fingerprint(o.init)}};
  }
  return j;
}

// A recorded fingerprint as this version writes it: its model config read and written again, so
// config fields added since the run started (crop_mode, interpolation), at their defaults, are
// not differences. A config this version cannot read stays as recorded (and differs).
json current_form(json fingerprint) {
  if (fingerprint.contains("config")) {
    try {
      fingerprint["config"] =
          json::parse(ModelConfig::from_json(fingerprint["config"].dump()).to_json());
    } catch (const std::exception&) {  // unreadable: compared as recorded, so it differs
    }
  }
  return fingerprint;
}

// "key (run: A, now: B), ..." for every setting that differs, "-" where one side does not
// record it (a setting recorded only when used: a run with --freeze resumed without it).
std::string fingerprint_diff(const json& run, const json& now) {
  std::string diff;
  auto differs = [&](const std::string& k, const std::string& was, const std::string& is) {
    diff += (diff.empty() ? "" : ", ") + k + " (run: " + was + ", now: " + is + ")";
  };
  for (const auto& [k, v] : now.items()) {
    if (!run.contains(k) || run[k] != v)
      differs(k, run.contains(k) ? run[k].dump() : "-", v.dump());
  }
  for (const auto& [k, v] : run.items()) {
    if (!now.contains(k)) differs(k, v.dump(), "-");
  }
  return diff;
}

void append_line(const std::string& path, const json& j) {
  std::ofstream f(path, std::ios::app);
  if (!f) throw std::runtime_error(path + ": cannot open for appending");
  f << j.dump() << '\n';
  if (!f) throw std::runtime_error(path + ": cannot append a metrics line");
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

RunDirectory::RunDirectory(const TrainOptions& o, const ModelConfig& c)
    : out_(o.out), fingerprint_(run_fingerprint(o, c).dump()) {
  if (out_.empty()) return;
  metrics_ = (fs::path(out_) / "metrics.jsonl").string();
  last_ = (fs::path(out_) / "last.safetensors").string();
  previous_ = (fs::path(out_) / "previous.safetensors").string();
}

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

// The lock file of a run directory, flock()ed: proves the directory writable and keeps a second
// writer out; the kernel drops the lock when the holder dies (no stale locks after kill -9).
int lock_directory(const std::string& out) {
  const std::string path = (fs::path(out) / ".vitpe.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::runtime_error(out + ": cannot write to the run directory (" + std::strerror(errno) +
                             ")");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    throw std::runtime_error(out + ": another vitpe process is writing to this run directory (" +
                             path + " is locked); wait for it or choose another --out");
  }
  return fd;
}

// Files a killed writer left half-written (NAME.tmp.PID); safe to remove under the lock.
void remove_stale_temporaries(const std::string& out) {
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.is_regular_file() && e.path().filename().string().find(".tmp.") != std::string::npos) {
      fs::remove(e.path());
    }
  }
}

// The trainer state in last.safetensors ("vitpe.train" metadata).
json trainer_state(const SafeTensorsFile& f) {
  auto it = f.metadata().find("vitpe.train");
  if (it == f.metadata().end()) {
    throw std::runtime_error(f.path() +
                             ": no \"vitpe.train\" metadata (not a checkpoint written by "
                             "`vitpe train`)");
  }
  return json::parse(it->second);
}

}  // namespace

std::string run_settings_diff(const std::string& out, const TrainOptions& o, const ModelConfig& c) {
  const fs::path last = fs::path(out) / "last.safetensors";
  if (!fs::exists(last)) return "no " + last.string() + " to tell its settings";
  const json st = trainer_state(SafeTensorsFile::open(last.string()));
  return fingerprint_diff(current_form(st.at("fingerprint")), run_fingerprint(o, c));
}

namespace {

// A resumption refused because the run was made with other settings (not a damaged file: no
// fallback to the previous checkpoint, which has the same settings).
struct SettingsDiffer : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Restores the model, the optimizer and the trainer state from one checkpoint of the run.
ResumePoint resume_from(const std::string& path, const json& fingerprint, Model& model,
                        AdamW& opt) {
  SafeTensorsFile f = SafeTensorsFile::open(path);
  const json st = trainer_state(f);
  const json recorded = current_form(st.at("fingerprint"));
  if (recorded != fingerprint) {
    throw SettingsDiffer(
        path + ": --resume with different settings: " + fingerprint_diff(recorded, fingerprint));
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
  load_params(model, weights, path);
  ResumePoint at;
  at.epoch = st.at("epoch");
  at.step = st.at("step");
  opt.load_state(optim_state, at.step);
  at.train_seconds = st.at("train_seconds");
  at.best_test_acc = st.at("best_test_acc");
  for (const json& r : st.at("history")) at.history.push_back(epoch_record_from_json(r));
  return at;
}

}  // namespace

ResumePoint RunDirectory::open(Model& model, AdamW& opt, bool resume, bool force,
                               const std::function<void(const std::string&)>& warn) {
  ResumePoint at;
  if (out_.empty()) return at;
  fs::create_directories(out_);
  lock_fd_ = lock_directory(out_);
  remove_stale_temporaries(out_);
  const bool has_last = fs::exists(last_), has_previous = fs::exists(previous_);
  if (!resume || (!has_last && !has_previous)) {
    std::vector<std::string> found;
    for (const char* name : {"metrics.jsonl", "last.safetensors", "previous.safetensors",
                             "model.safetensors", "best.safetensors"}) {
      if (fs::exists(fs::path(out_) / name)) found.push_back(name);
    }
    if (!found.empty() && !resume && !force) {
      throw std::runtime_error(out_ + " already holds a run (" + join(found, ", ") +
                               "): pass --resume to continue it, --force to replace it, or "
                               "choose a new --out");
    }
    for (const std::string& name : found) fs::remove(fs::path(out_) / name);
    return at;
  }
  const json now = json::parse(fingerprint_);
  std::string damaged;  // why last.safetensors could not be used
  if (has_last) {
    try {
      at = resume_from(last_, now, model, opt);
    } catch (const SettingsDiffer&) {
      throw;
    } catch (const std::exception& e) {
      damaged = e.what();
    }
  } else {
    damaged = last_ + ": missing";
  }
  if (!damaged.empty()) {
    if (!has_previous) {
      throw std::runtime_error("cannot resume: " + damaged + "; and there is no " + previous_ +
                               " to fall back to");
    }
    try {
      at = resume_from(previous_, now, model, opt);
    } catch (const SettingsDiffer&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot resume: " + damaged +
                               "; and the fallback failed too: " + e.what());
    }
    if (warn) {
      warn("warning: " + damaged + "\nwarning: resuming from " + previous_ + " (after epoch " +
           std::to_string(at.epoch) + "); the epoch after it is trained again");
    }
  }
  truncate_metrics(metrics_, at.epoch);
  return at;
}

void RunDirectory::log_step(int64_t epoch, int64_t step, double lr, double loss) {
  if (out_.empty()) return;
  append_line(metrics_,
              {{"type", "step"}, {"epoch", epoch}, {"step", step}, {"lr", lr}, {"loss", loss}});
}

void RunDirectory::save_epoch(Model& model, const AdamW& opt, const ResumePoint& state, bool best) {
  if (out_.empty()) return;
  json line = epoch_record_json(state.history.back());
  line["type"] = "epoch";
  append_line(metrics_, line);
  json hist = json::array();
  for (const EpochRecord& r : state.history) hist.emplace_back(epoch_record_json(r));
  std::map<std::string, std::string> meta;
  meta["vitpe.train"] = json{{"epoch", state.epoch},
                             {"step", state.step},
                             {"train_seconds", state.train_seconds},
                             {"best_test_acc", state.best_test_acc},
                             {"history", hist},
                             {"fingerprint", json::parse(fingerprint_)}}
                            .dump();
  std::vector<std::pair<std::string, Tensor>> optim;
  for (auto& [name, t] : opt.state()) optim.emplace_back("optim." + name, t);
  save_model(model, (fs::path(out_) / "model.safetensors").string());
  if (best) save_model(model, (fs::path(out_) / "best.safetensors").string());
  // The checkpoint being replaced stays as previous.safetensors: linked under a temporary name,
  // then renamed over the old one, so both names always hold a complete file.
  if (fs::exists(last_)) {
    const std::string tmp = previous_ + ".tmp." + std::to_string(::getpid());
    std::error_code ec;
    fs::remove(tmp, ec);
    fs::create_hard_link(last_, tmp, ec);
    if (ec) fs::copy_file(last_, tmp);  // a file system without hard links
    fs::rename(tmp, previous_);
  }
  save_model(model, last_, meta, optim);
}

}  // namespace vitpe
