// The results of an encoding comparison: what `vitpe compare` measured and results.json holds,
// before any statistics (vit/compare/stats.h) or presentation (vit/compare/report.h).
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
  // Cost at each size: the forward's multiply-adds x 2 per image (the model's estimate), and the
  // measured forward time per image (median of 5 batches of 32 after a warm-up, inference, on
  // the threads of the comparison; noisy on a busy machine). Empty in results written before.
  std::vector<double> gflops, ms_per_image;
  // Per column: the extension rule each grid-dependent kind of this model followed there
  // (Model::extension_rules, e.g. "learned1d extrapolate"; "-" at the training size). Empty in
  // results written before.
  std::vector<std::string> extension_rules;
  // Per column, the attention diagnostics of vit/compare/diagnostics.h on the column's first 64
  // test images (ViT only; empty for Swin and in results written before): mean attention
  // distance [block][head] in patches, and attention entropy [block] in nats.
  std::vector<std::vector<std::vector<double>>> attention_distance;
  std::vector<std::vector<double>> attention_entropy;
};

struct Picture {
  std::string caption;
  std::vector<uint8_t> png;  // PNG file bytes (empty when read back from results.json)
  // The PNG file's path relative to the results folder ("pictures/<encoding>/....png"), which
  // report.html links and results.json records; empty: the report inlines `png`.
  std::string file;
};

struct CompareResults {
  std::string title = "Positional encodings compared";
  std::vector<std::string> encodings;  // in the order asked for
  std::vector<uint64_t> seeds;
  // The evaluation columns: column k is image size sizes[k] under the extension policy
  // policies[k] ("native", "interpolate", "extrapolate"; empty = "native" for every column, as in
  // results written before). The training size appears once (where no policy applies).
  std::vector<int64_t> sizes;
  // The width of each column where it is not square: column k is sizes[k] rows x cols[k]
  // columns of pixels (0: square). Empty: every column square (results written before, or no
  // non-square size asked for).
  std::vector<int64_t> cols;
  std::vector<std::string> policies;
  // The resolution protocol of each column (data.h: zoom, canvas, dilute, translate, spread);
  // empty = the dataset's own rule for every column (results written before, or one protocol
  // not asked for).
  std::vector<std::string> protocols;
  int64_t train_size = 0;
  std::vector<RunResult> runs;
  std::vector<std::pair<std::string, std::vector<Picture>>> pictures;  // per encoding
  std::vector<std::pair<std::string, std::string>> settings;           // exact settings, in order
  std::vector<std::pair<std::string, std::string>> versions;           // library and tool versions
  double wall_seconds = 0;
  // The encoding the paired differences are taken against (empty: the first encoding).
  std::string reference;
  // The pre-declared primary contrasts, "A vs B @ LABEL" (LABEL a column_label): tested with
  // Holm's adjustment over this list alone; every other difference in the report is
  // exploratory (unadjusted). Empty: none declared.
  std::vector<std::string> primary;
  // Accuracy at or above which a run counts as a success, for studies whose outcomes are bimodal
  // (a seed that learns the task or stays near chance): the report adds success rates k/n and
  // the accuracy given success. 0: not asked for.
  double success_threshold = 0;
};

// Column k's width in pixels (its size where it is square), its size as tables print it ("56",
// or "56x42" rows x cols where it is not square), and whether it is the training size itself.
int64_t column_cols(const CompareResults& r, size_t k);
std::string size_label(const CompareResults& r, size_t k);
bool is_train_column(const CompareResults& r, size_t k);

// The column policy of FlexiViT's patch resize (CompareOptions::patch_resize).
inline constexpr const char* kPatchResize = "patch-resize";
// The policy of column k ("native" when none is recorded), and its label in tables: "42", or
// "42 interp" / "42 extrap" when the study compares policies, with the protocol before the policy
// when it names protocols ("42 zoom interp"; "56x42 zoom interp" not square); the training size
// is "28".
std::string column_policy(const CompareResults& r, size_t k);
std::string column_label(const CompareResults& r, size_t k);
// Whether any column has a policy other than native.
bool compares_policies(const CompareResults& r);
// The protocol of column k ("" when none is recorded: the dataset's own rule).
std::string column_protocol(const CompareResults& r, size_t k);
// Whether the columns name protocols ("42 zoom interp").
bool compares_protocols(const CompareResults& r);

}  // namespace vitpe
