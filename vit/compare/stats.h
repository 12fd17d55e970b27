// Statistics over the seeds of a comparison: Student's t, intervals of a mean, paired
// differences, the per-encoding summary, and the tools a study with many contrasts and bimodal
// outcomes needs (Holm's adjustment, Wilcoxon's signed-rank test, success rates). Pure functions:
// values in, numbers out; the report (vit/compare/report.h) only renders them.
//
// Units: the functions on plain vectors take values in whatever unit they are given (the
// comparison's accuracies are fractions in [0, 1], so their differences are in [-1, 1]) and
// return means, deviations and interval bounds in that unit. Probabilities and levels are in
// [0, 1]; "alpha" is a two-sided error rate (0.05 for 95 % intervals).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vit/compare/results.h"

namespace vitpe {

// ---- distributions ------------------------------------------------------------------------------

// The regularised incomplete beta function I_x(a, b) (a, b > 0, x in [0, 1]): the CDF at x of a
// Beta(a, b) variable, to about 1e-14 (Lentz's continued fraction).
double incomplete_beta(double a, double b, double x);
// The x with I_x(a, b) = p (p in [0, 1]), to about 1e-13.
double beta_quantile(double p, double a, double b);
// The standard normal CDF.
double normal_cdf(double z);
// Student's t with df > 0 degrees of freedom (df need not be whole): CDF at t, and the quantile
// t_p with P(T <= t_p) = p for p in (0, 1), both to about 1e-12.
double student_t_cdf(double t, double df);
double student_t_quantile(double p, double df);

// Student's t quantile t(0.975, df) as the report's intervals use it (df >= 1): the printed
// table's 3 decimals up to 30, Cornish-Fisher's expansion above (within 5e-4 of
// student_t_quantile(0.975, df) everywhere). Kept so that results written before draw the same
// intervals to the last digit; new statistics use student_t_quantile.
double t_quantile_975(int64_t df);

// ---- one sample ---------------------------------------------------------------------------------

// The mean of n values and the sample standard deviation (n - 1 in the denominator; 0 for fewer
// than 2 values, and a mean of 0 for none).
double sample_mean(const std::vector<double>& values);
double sample_stddev(const std::vector<double>& values);

// The mean of n values and the half-width of its t-based 95 % interval,
// t_quantile_975(n - 1) * s / sqrt(n) with the sample standard deviation s (0 when n < 2: one
// seed gives no interval, which the tables say instead of printing +- 0).
struct Interval {
  double mean = 0, half = 0, stddev = 0;
  int64_t n = 0;
  double low() const { return mean - half; }
  double high() const { return mean + half; }
  // Whether the interval lies entirely on one side of zero (needs n >= 2).
  bool excludes_zero() const { return n >= 2 && (low() > 0 || high() < 0); }
};
Interval mean_interval(const std::vector<double>& values);

// Student's one-sample t test of "the mean is 0" (for paired differences: the paired t test):
// t = mean / (s / sqrt(n)) with n - 1 degrees of freedom, and its two-sided p-value. Needs at
// least 2 values (throws std::invalid_argument). All values equal: t = 0 and p = 1 when they are
// 0, else t = +-inf and p = 0.
struct TTest {
  int64_t n = 0;
  double mean = 0, stddev = 0, t = 0, p = 1;
};
TTest t_test(const std::vector<double>& values);

// Wilcoxon's signed-rank test of "the differences are symmetric about 0", the rank-based
// companion of t_test for outcomes far from normal (a seed that fails to learn). Zero
// differences are dropped (Wilcoxon's rule) and tied magnitudes share their mean rank. W+ is the
// sum of the ranks of the positive differences. The two-sided p-value is 2 min(P(W+ <= w),
// P(W+ >= w)), capped at 1: exact (the distribution of W+ over every sign pattern of the
// observed ranks, ties included) for n <= kSignedRankExactMax non-zero differences, else from
// the normal approximation with the tie correction of the variance and no continuity
// correction. With n = 5 the smallest exact p-value is 2/32 = 0.0625: five seeds can never
// reach 0.05 with this test, six can (2/64).
inline constexpr int64_t kSignedRankExactMax = 50;
struct SignedRankTest {
  int64_t n = 0;      // non-zero differences
  int64_t zeros = 0;  // differences dropped as zero
  double w_plus = 0, w_minus = 0;
  double p = 1;
  bool exact = true;
};
SignedRankTest wilcoxon_signed_rank(const std::vector<double>& differences);

// ---- many contrasts -----------------------------------------------------------------------------

// Holm's step-down adjustment of m p-values (each in [0, 1]; any order): with p_(1) <= ... <=
// p_(m), the adjusted p_(j) = max over i <= j of min(1, (m - i + 1) p_(i)), returned in the
// input's order. Rejecting where the adjusted value is <= alpha keeps the chance of any false
// rejection among the m at most alpha, whatever their dependence.
std::vector<double> holm_adjust(const std::vector<double>& p);

// A contrast: one difference per pair (e.g. accuracy(A, seed) - accuracy(B, seed) over the
// seeds both have), in the unit of the values.
struct Contrast {
  std::string name;
  std::vector<double> differences;
};
// Each contrast of a pre-declared list tested with t_test and wilcoxon_signed_rank, both
// Holm-adjusted over the list, with two t-intervals of its mean:
// - [low, high]: Holm's interval, at the level Holm's step-down tests the contrast at: with the
//   t p-values sorted, alpha / (m - j + 1) for the j-th as long as every one before it was
//   rejected, and from the first one retained on, that one's level for all the rest. It
//   excludes 0 exactly when Holm rejects the contrast (significant).
// - [simultaneous_low, simultaneous_high]: Bonferroni's, at alpha / m for every contrast, which
//   all cover their true means at once with probability >= 1 - alpha (Holm's, drawn at levels
//   >= alpha / m, are no wider, and need not).
// Both are in the unit of the differences.
// Results in the input's order; alpha in (0, 1). A contrast with fewer than 2 differences (a
// study still running, or a merge that lacks one side's seeds) cannot be tested yet: it stays in
// the list, so the others are adjusted for the whole declared list, with p = 1, testable false,
// its mean the one difference or NaN and its intervals NaN.
struct ContrastResult {
  std::string name;
  bool testable = true;  // at least 2 differences
  int64_t n = 0;
  double mean = 0, stddev = 0;
  double p = 1, p_holm = 1;                          // t test, raw and Holm-adjusted
  double p_signed_rank = 1, p_signed_rank_holm = 1;  // Wilcoxon, raw and Holm-adjusted
  double level = 0;                                  // the two-sided error rate of [low, high]
  double low = 0, high = 0;
  double simultaneous_low = 0, simultaneous_high = 0;
  bool significant = false;  // p_holm <= alpha
};
std::vector<ContrastResult> holm_contrasts(const std::vector<Contrast>& contrasts,
                                           double alpha = 0.05);

// ---- bimodal outcomes ---------------------------------------------------------------------------

// For outcomes that either succeed or fail (a seed that learns the task or stays near chance),
// where a mean and its t-interval describe neither mode: the success count k of n (a value
// succeeds when it is >= threshold), the rate k / n with its exact (Clopper-Pearson) two-sided
// interval at 1 - alpha, and the mean interval (mean_interval) of the successful values and of
// the failed ones. No values: a rate of 0 with the interval [0, 1]. Values must be finite
// (std::invalid_argument otherwise).
struct SuccessSummary {
  double threshold = 0;
  int64_t n = 0, successes = 0;
  double rate = 0, rate_low = 0, rate_high = 0;
  Interval given_success, given_failure;
};
SuccessSummary success_summary(const std::vector<double>& values, double threshold,
                               double alpha = 0.05);

// ---- over a comparison's results ----------------------------------------------------------------

// The accuracies of an encoding's runs at column k, in the order of r.runs (runs without the
// column left out).
std::vector<double> accuracies_at(const CompareResults& r, const std::string& encoding, size_t k);

// accuracy(encoding, seed) - accuracy(against, seed) at column k over the seeds both have (same
// seed: same initialisation stream, data order and augmentation), in the order of the
// encoding's runs in r.runs; a seed with no value on either side is left out.
std::vector<double> paired_accuracy_differences(const CompareResults& r,
                                                const std::string& encoding,
                                                const std::string& against, size_t k);

// Per column k: the mean over the encoding's runs of (run.*field)[k], for the per-column
// measurements of RunResult (gflops: GFLOPs per image; ms_per_image: ms). Runs without column k
// are left out; NaN where none has it. Size: r.sizes.size().
std::vector<double> column_means(const CompareResults& r, const std::string& encoding,
                                 std::vector<double> RunResult::*field);

// Per epoch, ascending: {epoch, the mean over the encoding's runs of unit * (record.*field)}
// (e.g. EpochRecord::test_acc with unit 100: percent), over the runs that recorded the epoch.
std::vector<std::pair<int64_t, double>> epoch_means(const CompareResults& r,
                                                    const std::string& encoding,
                                                    double EpochRecord::*field, double unit = 1);

// At column k, from the attention diagnostics of the encoding's runs: per block b (0-based; as
// many as the deepest run has), the mean attention distance in patches over every head of every
// run (NaN for a block with none); and the mean attention entropy in nats over every block of
// every run (NaN when no run recorded it).
std::vector<double> attention_distance_by_block(const CompareResults& r,
                                                const std::string& encoding, size_t k);
double attention_entropy_mean(const CompareResults& r, const std::string& encoding, size_t k);

// A primary contrast "A vs B @ LABEL" read against the results: the two encodings and the
// column whose label is LABEL. Throws std::invalid_argument saying what was expected and found
// (an unknown encoding or label, a missing " vs " or " @ ").
struct PrimarySpec {
  std::string a, b;
  size_t column = 0;
};
PrimarySpec parse_primary(const CompareResults& r, const std::string& text);
// r.primary as Holm-adjusted contrasts of paired accuracy differences (accuracy points, A - B by
// seed); empty when none is declared.
std::vector<ContrastResult> primary_contrasts(const CompareResults& r, double alpha = 0.05);

// Whether training levelled off: for each run of the encoding with at least two epochs, the
// change of test accuracy over its last epoch (points); plateaued counts those within `points`.
struct PlateauSummary {
  int64_t runs = 0, plateaued = 0;
  double largest_change = 0;  // the largest |last - previous| in points
};
PlateauSummary plateau(const CompareResults& r, const std::string& encoding, double points = 0.5);

// Per encoding (those with at least one run, in r.encodings' order): its runs, the parameters
// its encoding adds, the mean training time, and at each column the mean, sample standard
// deviation and half-width of the t-based 95 % interval (mean_interval) of its accuracies.
struct SummaryRow {
  std::string encoding;
  int runs = 0;
  int64_t params_added = 0;
  double train_seconds = 0;                // mean over seeds
  std::vector<double> mean, stddev, ci95;  // accuracy at each column
};
std::vector<SummaryRow> summarize(const CompareResults& r);

// Paired differences against the reference encoding: at each column, the mean_interval of
// paired_accuracy_differences(r, encoding, reference). Pairing removes the seed-to-seed
// variation both share, so it separates encodings that the per-encoding intervals cannot. One
// row per encoding other than the reference that shares a seed with it.
struct PairedRow {
  std::string encoding;
  std::vector<Interval> diff;  // at each column, in accuracy units ([-1, 1])
};
std::string reference_encoding(const CompareResults& r);  // r.reference, or the first encoding
std::vector<PairedRow> paired_differences(const CompareResults& r);

}  // namespace vitpe
