// Results of an encoding comparison and their presentations: the terminal table, results.json,
// results.csv and report.html (self-contained: inline CSS, charts as inline SVG, encoding
// pictures as base64 PNG data URIs, no scripts, no external requests).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vit/train/train.h"

namespace vitpe {

// One trained model: an encoding with a seed.
struct RunResult {
  std::string encoding;
  uint64_t seed = 0;
  int64_t params = 0;        // all parameters of the model
  int64_t params_added = 0;  // parameters the encoding owns (Model::num_encoding_params)
  double train_seconds = 0;
  std::vector<double> accuracy;  // at CompareResults::sizes, in [0, 1]
  std::vector<double> loss;      // at CompareResults::sizes
  std::vector<EpochRecord> history;
};

struct Picture {
  std::string caption;
  std::vector<uint8_t> png;  // PNG file bytes
};

struct CompareResults {
  std::string title = "Positional encodings compared";
  std::vector<std::string> encodings;  // in the order asked for
  std::vector<uint64_t> seeds;
  std::vector<int64_t> sizes;  // evaluation sizes; the training size is among them
  int64_t train_size = 0;
  std::vector<RunResult> runs;
  std::vector<std::pair<std::string, std::vector<Picture>>> pictures;  // per encoding
  std::vector<std::pair<std::string, std::string>> settings;           // exact settings, in order
  std::vector<std::pair<std::string, std::string>> versions;           // library and tool versions
  double wall_seconds = 0;
};

// Mean and sample standard deviation (n - 1; 0 for a single value) over the seeds.
struct SummaryRow {
  std::string encoding;
  int runs = 0;
  int64_t params_added = 0;
  double train_seconds = 0;          // mean over seeds
  std::vector<double> mean, stddev;  // accuracy at each size
};
std::vector<SummaryRow> summarize(const CompareResults& r);

std::string terminal_table(const CompareResults& r);
std::string results_json(const CompareResults& r);
std::string results_csv(const CompareResults& r);
std::string report_html(const CompareResults& r);
// Reads results.json back (to re-render a report, and for tests).
CompareResults parse_results_json(const std::string& text);

std::string base64_encode(const std::vector<uint8_t>& bytes);

}  // namespace vitpe
