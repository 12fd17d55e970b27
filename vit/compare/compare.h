// `vitpe compare`: trains one model per (encoding, seed) with otherwise identical settings
// (same data order and augmentation per seed, same schedule, same initialisation stream),
// evaluates each at several image sizes, and writes results.json, results.csv and report.html.
//
// Under mpirun the runs are spread over the ranks (CompareOptions::comm); a rank that dies
// loses only the epoch it was in, and the same command run again continues from the files.
//
// Each run lives in OUT/runs/<encoding>-s<seed>/ (a normal training run directory); a run whose
// result.json exists is not trained again, so an interrupted comparison continues where it
// stopped, but only when it was trained with the same settings (else an error naming what
// differs), and it is evaluated again at this comparison's sizes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vit/compare/report.h"
#include "vit/train/train.h"

namespace vitpe {

struct CompareOptions {
  TrainOptions train;                  // shared settings (train.encoding and seed are set per run)
  std::vector<std::string> encodings;  // empty: default_encodings(the model)
  std::vector<uint64_t> seeds = {1};
  std::vector<int64_t> sizes;  // evaluation sizes; empty: train size, +8, +16 px
  // Per evaluation size, its width where it is not square: sizes[i] rows x size_cols[i] columns
  // (0 or absent: square). Every side a multiple of the patch.
  std::vector<int64_t> size_cols;
  // How the encodings meet each size other than the training size: every policy given is
  // evaluated on the same trained model, one column each (the training size once).
  std::vector<ExtensionPolicy> policies = {ExtensionPolicy::native};
  // FlexiViT's patch resize as one more column per other size and protocol (policy
  // "patch-resize"): the trained model with patches of patch x size / training size pixels
  // (with_patch_size: PI-resized patch embedding), so the grid and the encoding stay as trained
  // and only the patches' content changes. ViT family only; sizes where that patch is not whole
  // get no such column (the settings say which).
  bool patch_resize = false;
  // How each size other than the training size is rendered (data.h protocol_names(): zoom,
  // canvas, dilute, translate, spread); every protocol given is evaluated, one column each.
  // Empty: the dataset's own rule.
  std::vector<std::string> protocols;
  // Fine-tune every (encoding, seed) from the matching finished run of an earlier comparison in
  // this directory (runs/ENC-sSEED/model.safetensors, its final weights), e.g. each kind's 28 px
  // models one epoch at 56 px; checked for every run before any training. Empty encodings: the
  // earlier comparison's. Excludes train.init.
  std::string init_runs;
  std::string out;       // directory for the results (required)
  bool pictures = true;  // render each encoding's pictures into the report
  // The encoding paired differences are taken against (one of `encodings`; empty: the first).
  std::string reference;
  // Pre-declared primary contrasts, "A vs B @ COLUMN" (CompareResults::primary), checked against
  // the encodings and columns before any training; and the success threshold of bimodal
  // outcomes (accuracy in [0, 1]; 0: none). Both recorded in the results.
  std::vector<std::string> primary;
  double success_threshold = 0;
  // A time budget in minutes (0: none). Before the sweep the comparison measures what the plan
  // costs (one real epoch of its first run, which the sweep then continues, and a few training
  // steps of every encoding) and refuses a plan whose estimate exceeds it, saying what to cut.
  double budget_minutes = 0;
  std::vector<std::pair<std::string, std::string>> extra_settings;  // e.g. the command line
  // A sweep over these ranks (`mpirun -np N vitpe compare`): rank 0 deals the (encoding, seed)
  // runs out (those still to train first), each rank trains its runs one at a time in the
  // shared OUT/runs/, and rank 0 gathers the results and writes the outputs. Every rank calls
  // run_compare with the same options; the others return only their own runs. Null: alone.
  Communicator* comm = nullptr;
};

// What a comparison is estimated to cost (see CompareOptions::budget_minutes).
struct PlanEstimate {
  double total_seconds = 0;        // the whole study, divided over the ranks
  double train_seconds = 0;        // the training part of it
  double evaluation_seconds = 0;   // the evaluation part of it
  double probe_epoch_seconds = 0;  // the measured epoch of the first run (0: none measured)
  std::string probe_dir;           // that run's directory (kept when the plan goes ahead)
  std::string summary;             // "45 runs (9 encodings x 5 seeds), 10 epochs of ..."
};

// The encodings compared by default: every kind the model's family supports.
std::vector<std::string> default_encodings(const ModelConfig& model);

// Runs the comparison, writes OUT/results.json, results.csv, report.html, and returns the
// results.
CompareResults run_compare(const CompareOptions& options);

// Writes results.json, results.csv and report.html into `out` (atomically, each).
void write_compare_outputs(const CompareResults& results, const std::string& out);

// Library versions and machine facts for the report.
std::vector<std::pair<std::string, std::string>> version_info();

}  // namespace vitpe
