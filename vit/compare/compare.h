// `vitpe compare`: trains one model per (encoding, seed) with otherwise identical settings
// (same data order and augmentation per seed, same schedule, same initialisation stream),
// evaluates each at several image sizes, and writes results.json, results.csv and report.html.
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
  std::vector<std::string> encodings;  // empty: default_encodings(kind of the model)
  std::vector<uint64_t> seeds = {1};
  std::vector<int64_t> sizes;  // evaluation sizes; empty: train size, +8, +16 px
  std::string out;             // directory for the results (required)
  bool pictures = true;        // render each encoding's pictures into the report
  std::vector<std::pair<std::string, std::string>> extra_settings;  // e.g. the command line
};

// The encodings compared by default: every kind the model family supports.
std::vector<std::string> default_encodings(ModelKind kind);

// Runs the comparison, writes OUT/results.json, results.csv, report.html, and returns the
// results.
CompareResults run_compare(const CompareOptions& options);

// Writes results.json, results.csv and report.html into `out` (atomically, each).
void write_compare_outputs(const CompareResults& results, const std::string& out);

// Library versions and machine facts for the report.
std::vector<std::pair<std::string, std::string>> version_info();

}  // namespace vitpe
