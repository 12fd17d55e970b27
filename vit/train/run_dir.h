// A run directory (the files are listed in train.h): the settings a resumption must match, the
// metrics log, and the atomic checkpoints. Without a directory (TrainOptions::out empty) every
// call does nothing, so the trainer never asks whether it has one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vit/models/model.h"
#include "vit/train/optim.h"
#include "vit/train/train.h"

namespace vitpe {

// Where a run continues: after `epoch` epochs and `step` optimizer steps (0, 0 for a new run).
struct ResumePoint {
  int64_t epoch = 0, step = 0;
  double train_seconds = 0, best_test_acc = 0;
  std::vector<EpochRecord> history;
};

class RunDirectory {
 public:
  // The fingerprint (model config, data, recipe, seed) is taken from `options` and `config`.
  RunDirectory(const TrainOptions& options, const ModelConfig& config);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // Creates the directory and takes its lock (another process writing there is an error, and so
  // is a directory that cannot be written: both before any training), removes temporary files a
  // killed writer left. With `resume` and a last.safetensors there: checks that it was written
  // with the same settings (else throws listing each difference), restores the weights and the
  // optimizer, and drops metric lines written after that checkpoint. A last.safetensors that
  // cannot be read (truncated, corrupt) is reported on `warn` and the previous epoch's
  // checkpoint (previous.safetensors) is used instead; when that fails too, the error names
  // both. Without `resume`, a run already there is an error unless `force` (then its files are
  // replaced).
  ResumePoint open(Model& model, AdamW& opt, bool resume, bool force,
                   const std::function<void(const std::string&)>& warn = {});

  // A {"type":"step"} metrics line.
  void log_step(int64_t epoch, int64_t step, double lr, double loss);
  // After an epoch: its {"type":"epoch"} line, then model.safetensors, best.safetensors (when
  // `best`) and last.safetensors (weights, optimizer, trainer state), the resume point last so a
  // kill between the writes loses nothing. The last.safetensors it replaces becomes
  // previous.safetensors first (a hard link renamed into place): at every instant both names
  // hold a complete checkpoint.
  void save_epoch(Model& model, const AdamW& opt, const ResumePoint& state, bool best);

 private:
  std::string out_, metrics_, last_, previous_;
  std::string fingerprint_;  // JSON
  int lock_fd_ = -1;         // flock()ed while the directory is open; released by the kernel
                             // if the process dies
};

// "" when the run in `out` (its last.safetensors) was made with the settings of `options` and
// `config`; otherwise which settings differ ("key (run: A, now: B), ...") or why it cannot be
// told (no checkpoint). For reusing finished runs (compare).
std::string run_settings_diff(const std::string& out, const TrainOptions& options,
                              const ModelConfig& config);

}  // namespace vitpe
