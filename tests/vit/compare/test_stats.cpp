// Tests of vit/compare/stats.cpp against independent references: closed forms of the beta and t
// distributions (df 1, 2 and 4), reference values computed once with scipy 1.17.1 and mpmath
// 1.4.1 (40 digits) and pasted here as constants (scipy.stats.t.ppf / t.cdf / beta.cdf,
// ttest_1samp, wilcoxon, binomtest(...).proportion_ci(method="exact"); neither is needed to run
// the tests), enumeration of every sign pattern for the signed-rank test, and hand-worked examples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "vit/compare/stats.h"

namespace vitpe {
namespace {

TEST(Statistics, StudentTQuantiles) {
  // Reference values of t(0.975, df) (e.g. R's qt(0.975, df)).
  const std::vector<std::pair<int64_t, double>> known = {
      {1, 12.7062}, {2, 4.3027},  {4, 2.7764},  {9, 2.2622},   {30, 2.0423},
      {31, 2.0395}, {40, 2.0211}, {60, 2.0003}, {120, 1.9799}, {100000, 1.9600}};
  for (const auto& [df, t] : known) EXPECT_NEAR(t_quantile_975(df), t, 1e-3) << "df " << df;
  for (int64_t df = 1; df < 200; ++df) {
    EXPECT_GT(t_quantile_975(df), t_quantile_975(df + 1)) << "decreasing at df " << df;
  }
  EXPECT_THROW(t_quantile_975(0), std::invalid_argument);
}

TEST(Statistics, MeanIntervalOfSeeds) {
  const Interval i = mean_interval({1, 2, 3, 4, 5});
  EXPECT_EQ(i.n, 5);
  EXPECT_DOUBLE_EQ(i.mean, 3);
  EXPECT_NEAR(i.stddev, std::sqrt(2.5), 1e-12);
  EXPECT_NEAR(i.half, 2.776 * std::sqrt(2.5) / std::sqrt(5.0), 1e-12);
  EXPECT_TRUE(i.excludes_zero());
  EXPECT_FALSE(mean_interval({-1, 1, 0.5}).excludes_zero());
  EXPECT_TRUE(mean_interval({-3, -2, -2.5}).excludes_zero());
  const Interval one = mean_interval({0.7});
  EXPECT_EQ(one.half, 0);
  EXPECT_FALSE(one.excludes_zero()) << "one seed says nothing about an interval";
  EXPECT_EQ(mean_interval({}).n, 0);
}

TEST(Statistics, IncompleteBetaAgainstClosedFormsAndReferences) {
  for (double x : {0.0, 1e-6, 0.03, 0.3, 0.5, 0.77, 0.999, 1.0}) {
    EXPECT_NEAR(incomplete_beta(1, 1, x), x, 1e-14) << x;
    EXPECT_NEAR(incomplete_beta(3.5, 1, x), std::pow(x, 3.5), 1e-14) << x;
    EXPECT_NEAR(incomplete_beta(1, 2.25, x), 1 - std::pow(1 - x, 2.25), 1e-14) << x;
    // The arcsine law: I_x(1/2, 1/2) = (2 / pi) asin(sqrt(x)).
    EXPECT_NEAR(incomplete_beta(0.5, 0.5, x), 2 / std::numbers::pi * std::asin(std::sqrt(x)), 1e-13)
        << x;
    EXPECT_NEAR(incomplete_beta(2.5, 7, x), 1 - incomplete_beta(7, 2.5, 1 - x), 1e-14) << x;
  }
  // mpmath.betainc(a, b, 0, x, regularized=True), 40 digits.
  EXPECT_NEAR(incomplete_beta(2.5, 3.5, 0.3), 0.29675298929566638, 1e-13);
  EXPECT_NEAR(incomplete_beta(0.5, 10, 0.01), 0.34207182484321553, 1e-13);
  EXPECT_NEAR(incomplete_beta(30, 40, 0.45), 0.64474800855856811, 1e-12);
  // The quantile inverts it, also far in the tails.
  for (double p : {1e-12, 0.025, 0.5, 0.975, 1 - 1e-9}) {
    const double x = beta_quantile(p, 2.5, 3.5);
    EXPECT_NEAR(incomplete_beta(2.5, 3.5, x), p, 1e-13 + 1e-10 * p) << p;
  }
  EXPECT_NEAR(beta_quantile(0.3, 1, 1), 0.3, 1e-15);
  EXPECT_NEAR(beta_quantile(0.3, 4, 1), std::pow(0.3, 0.25), 1e-14);
}

TEST(Statistics, StudentTAgainstClosedFormsAndTables) {
  for (double t : {-30.0, -2.5, -0.1, 0.0, 0.4, 1.0, 3.0, 12.0}) {
    EXPECT_NEAR(student_t_cdf(t, 1), 0.5 + std::atan(t) / std::numbers::pi, 1e-14) << t;
    EXPECT_NEAR(student_t_cdf(t, 2), 0.5 + t / (2 * std::sqrt(2 + t * t)), 1e-14) << t;
  }
  // scipy.stats.t.cdf, non-integer df included.
  EXPECT_NEAR(student_t_cdf(2.0, 3), 0.9303370157205785, 1e-13);
  EXPECT_NEAR(student_t_cdf(-1.5, 7.5), 0.08724028529323204, 1e-13);
  EXPECT_NEAR(student_t_cdf(6.0, 2), 0.9866642633922876, 1e-13);
  for (double p : {0.001, 0.025, 0.3, 0.5, 0.7, 0.975, 0.99375, 0.9999}) {
    EXPECT_NEAR(student_t_quantile(p, 1), std::tan(std::numbers::pi * (p - 0.5)),
                1e-12 * (1 + std::fabs(std::tan(std::numbers::pi * (p - 0.5)))))
        << p;
    EXPECT_NEAR(student_t_quantile(p, 2), (2 * p - 1) / std::sqrt(2 * p * (1 - p)), 1e-11) << p;
    // df 4: with a = 4 p (1 - p) and q = cos(acos(sqrt(a)) / 3) / sqrt(a), t = +-2 sqrt(q - 1).
    const double a = 4 * p * (1 - p), q = std::cos(std::acos(std::sqrt(a)) / 3) / std::sqrt(a);
    EXPECT_NEAR(student_t_quantile(p, 4), (p < 0.5 ? -2 : 2) * std::sqrt(q - 1), 1e-11) << p;
  }
  // t(p, df) from mpmath (the root of its 40-digit incomplete beta), as printed tables give them.
  const struct {
    double p, df, t;
  } table[] = {{0.975, 1, 12.706204736174693},   {0.975, 2, 4.3026527297494618},
               {0.975, 3, 3.1824463052837084},   {0.975, 4, 2.7764451051977935},
               {0.975, 5, 2.5705818356363148},   {0.975, 9, 2.262157162798205},
               {0.975, 10, 2.2281388519862742},  {0.975, 30, 2.0422724563012379},
               {0.975, 100, 1.9839715185235519}, {0.995, 4, 4.604094871349992},
               {0.9875, 4, 3.4954059325164416},  {0.99375, 4, 4.3146560488867429},
               {0.999, 2, 22.327124770119865}};
  for (const auto& row : table) {
    EXPECT_NEAR(student_t_quantile(row.p, row.df), row.t, 1e-9 * row.t)
        << "p " << row.p << " df " << row.df;
    EXPECT_NEAR(student_t_quantile(1 - row.p, row.df), -row.t, 1e-9 * row.t);
  }
  // Towards the normal distribution.
  EXPECT_NEAR(student_t_quantile(0.975, 1e9), 1.959963984540054, 1e-6);
  EXPECT_NEAR(normal_cdf(1.959963984540054), 0.975, 1e-15);
}

// The report's table quantile is the exact one to its three decimals (below 30 degrees of
// freedom) and within Cornish-Fisher's 1e-4 above.
TEST(Statistics, TableQuantileIsTheExactOneRounded) {
  for (int64_t df = 1; df <= 30; ++df)
    EXPECT_LE(std::fabs(t_quantile_975(df) - student_t_quantile(0.975, static_cast<double>(df))),
              5e-4 + 1e-12)
        << df;
  for (int64_t df = 31; df <= 400; ++df)
    EXPECT_LT(std::fabs(t_quantile_975(df) - student_t_quantile(0.975, static_cast<double>(df))),
              1e-4)
        << df;
}

TEST(Statistics, TTestByHand) {
  // {1, 2, 4}: mean 7/3, s^2 = 7/3, so t = (7/3) / sqrt(7/9) = sqrt(7) with 2 degrees of
  // freedom, whose two-sided p is 1 - t / sqrt(2 + t^2) = 1 - sqrt(7) / 3.
  const TTest a = t_test({1, 2, 4});
  EXPECT_EQ(a.n, 3);
  EXPECT_NEAR(a.mean, 7.0 / 3, 1e-15);
  EXPECT_NEAR(a.stddev, std::sqrt(7.0 / 3), 1e-15);
  EXPECT_NEAR(a.t, std::sqrt(7.0), 1e-14);
  EXPECT_NEAR(a.p, 1 - std::sqrt(7.0) / 3, 1e-14);
  EXPECT_NEAR(t_test({-1, -2, -4}).t, -std::sqrt(7.0), 1e-14);
  EXPECT_NEAR(t_test({-1, -2, -4}).p, a.p, 1e-15);
  // scipy.stats.ttest_1samp([0.012, -0.004, 0.021, 0.008, 0.015], 0).
  const TTest b = t_test({0.012, -0.004, 0.021, 0.008, 0.015});
  EXPECT_NEAR(b.t, 2.488921616541492, 1e-12);
  EXPECT_NEAR(b.p, 0.0675623667986586, 1e-12);
  // No spread: decided by the mean alone.
  EXPECT_EQ(t_test({0, 0, 0}).p, 1);
  EXPECT_EQ(t_test({0.2, 0.2}).p, 0);
  EXPECT_TRUE(std::isinf(t_test({0.2, 0.2}).t));
}

// The exact signed-rank p-value by brute force: every one of the 2^n sign patterns of the ranks,
// the ranks found by counting (mean ranks for ties).
double signed_rank_p_by_enumeration(const std::vector<double>& d) {
  std::vector<double> x;
  for (double v : d)
    if (v != 0) x.push_back(v);
  const size_t n = x.size();
  std::vector<double> rank(n);
  for (size_t i = 0; i < n; ++i) {
    double below = 0, equal = 0;
    for (size_t j = 0; j < n; ++j) {
      below += std::fabs(x[j]) < std::fabs(x[i]);
      equal += std::fabs(x[j]) == std::fabs(x[i]);
    }
    rank[i] = below + (equal + 1) / 2;
  }
  double w = 0;
  for (size_t i = 0; i < n; ++i) w += x[i] > 0 ? rank[i] : 0;
  double low = 0, high = 0;
  for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (mask >> i & 1) ? rank[i] : 0;
    low += s <= w + 1e-9;
    high += s >= w - 1e-9;
  }
  return std::min(1.0, 2 * std::min(low, high) / static_cast<double>(uint64_t{1} << n));
}

TEST(Statistics, SignedRankExactAgainstEnumeration) {
  const std::vector<std::vector<double>> samples = {
      {0.5, -0.5, 1.0, 0, 2.0, -1.0, 3.0, 3.0, -0.25},  // ties across signs, a zero
      {0.03, 0.01, -0.02, 0.05, 0.04, 0.06, -0.01, 0.02, 0.07, 0.08, 0.09, -0.03},
      {1, 1, 1, -1, 1, 1},  // one tie group
      {-0.2, -0.1, -0.4, -0.3, -0.5, -0.6, -0.7, 0.05}};
  for (const auto& d : samples) {
    const SignedRankTest t = wilcoxon_signed_rank(d);
    EXPECT_TRUE(t.exact);
    EXPECT_NEAR(t.p, signed_rank_p_by_enumeration(d), 1e-14) << d.size() << " values";
    EXPECT_NEAR(t.w_plus + t.w_minus, t.n * (t.n + 1) / 2.0, 1e-12);
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(-6, 9);  // small integers: ties and zeros often
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<double> d(2 + trial % 13);
    for (double& v : d) v = value(rng) / 4.0;
    EXPECT_NEAR(wilcoxon_signed_rank(d).p, signed_rank_p_by_enumeration(d), 1e-13) << trial;
  }
}

TEST(Statistics, SignedRankByHand) {
  // Five positive differences: only 1 of the 32 sign patterns is as extreme on each side.
  SignedRankTest t = wilcoxon_signed_rank({0.1, 0.2, 0.3, 0.4, 0.5});
  EXPECT_EQ(t.n, 5);
  EXPECT_EQ(t.w_plus, 15);
  EXPECT_EQ(t.w_minus, 0);
  EXPECT_DOUBLE_EQ(t.p, 2.0 / 32) << "five seeds can never reach p < 0.05";
  EXPECT_DOUBLE_EQ(wilcoxon_signed_rank({1, 2, 3, 4, 5, 6}).p, 2.0 / 64);
  // {1, -2, 3, 4, 5}: W- = 2; the subsets of the ranks 1-5 summing to <= 2 are {}, {1}, {2}.
  t = wilcoxon_signed_rank({1, -2, 3, 4, 5});
  EXPECT_EQ(t.w_minus, 2);
  EXPECT_DOUBLE_EQ(t.p, 2 * 3.0 / 32);
  // scipy.stats.wilcoxon(..., method="exact"): W- = 9 of 55, p = 66 / 1024.
  t = wilcoxon_signed_rank({1.2, -0.5, 3.1, 2.2, -1.7, 0.9, 4.4, -0.3, 2.8, 1.5});
  EXPECT_EQ(t.w_minus, 9);
  EXPECT_NEAR(t.p, 0.064453125, 1e-15);
  // Zeros are dropped; nothing left: no evidence.
  t = wilcoxon_signed_rank({0, 0.1, 0, 0.2});
  EXPECT_EQ(t.zeros, 2);
  EXPECT_EQ(t.n, 2);
  EXPECT_DOUBLE_EQ(t.p, 2.0 / 4);
  EXPECT_EQ(wilcoxon_signed_rank({0, 0}).p, 1);
  EXPECT_EQ(wilcoxon_signed_rank({}).p, 1);
}

TEST(Statistics, SignedRankNormalApproximation) {
  // 60 differences (-0.9 .. 1.3 in steps of 0.1: many ties, 2 zeros); against
  // scipy.stats.wilcoxon(d, method="approx", correction=False, zero_method="wilcox"), which
  // gives min(W+, W-) = 595 and p = 0.04353205576279501.
  std::vector<double> d;
  for (int i = 0; i < 60; ++i) d.push_back(((i * 37) % 23 - 9) / 10.0);
  const SignedRankTest t = wilcoxon_signed_rank(d);
  EXPECT_FALSE(t.exact);
  EXPECT_EQ(t.n, 58);
  EXPECT_EQ(t.zeros, 2);
  EXPECT_EQ(std::min(t.w_plus, t.w_minus), 595);
  EXPECT_NEAR(t.p, 0.04353205576279501, 1e-12);
}

TEST(Statistics, HolmAdjustmentByHand) {
  // Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at the
  // running maximum 0.06.
  const std::vector<double> a = holm_adjust({0.01, 0.04, 0.03, 0.005});
  const std::vector<double> want = {0.03, 0.06, 0.06, 0.02};
  ASSERT_EQ(a.size(), want.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-15) << i;
  EXPECT_EQ(holm_adjust({0.5, 0.9}), (std::vector<double>{1, 1})) << "capped at 1";
  EXPECT_EQ(holm_adjust({0.2}), std::vector<double>{0.2}) << "one contrast: unadjusted";
  EXPECT_TRUE(holm_adjust({}).empty());
}

TEST(Statistics, HolmContrastsByHand) {
  const std::vector<Contrast> c = {{"strong", {0.10, 0.12, 0.11, 0.13}},
                                   {"weak", {0.02, -0.01, 0.03, 0.01}},
                                   {"clear", {0.05, 0.06, 0.04, 0.05}}};
  const std::vector<ContrastResult> r = holm_contrasts(c, 0.05);
  ASSERT_EQ(r.size(), 3u);
  std::vector<double> p;
  for (const Contrast& k : c) p.push_back(t_test(k.differences).p);
  const std::vector<double> adjusted = holm_adjust(p);
  // "strong" has the smallest p (its t is the largest), then "clear", then "weak".
  ASSERT_LT(p[0], p[2]);
  ASSERT_LT(p[2], p[1]);
  const double levels[] = {0.05 / 3, 0.05 / 1, 0.05 / 2};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(c[i].name);
    EXPECT_EQ(r[i].name, c[i].name);
    EXPECT_EQ(r[i].n, 4);
    EXPECT_DOUBLE_EQ(r[i].p, p[i]);
    EXPECT_DOUBLE_EQ(r[i].p_holm, adjusted[i]);
    const double se = sample_stddev(c[i].differences) / 2;
    const double mean = sample_mean(c[i].differences);
    // "weak" (p about 0.2) is retained, at its own step's level alpha / 1.
    EXPECT_NEAR(r[i].level, levels[i], 1e-15);
    EXPECT_NEAR(r[i].high - r[i].low, 2 * student_t_quantile(1 - levels[i] / 2, 3) * se, 1e-12);
    EXPECT_NEAR((r[i].high + r[i].low) / 2, mean, 1e-15);
    const double sim = student_t_quantile(1 - 0.05 / 6, 3) * se;
    EXPECT_NEAR(r[i].simultaneous_low, mean - sim, 1e-12);
    EXPECT_NEAR(r[i].simultaneous_high, mean + sim, 1e-12);
    EXPECT_DOUBLE_EQ(r[i].p_signed_rank, wilcoxon_signed_rank(c[i].differences).p);
  }
  EXPECT_TRUE(r[0].significant);
  EXPECT_FALSE(r[1].significant);
  EXPECT_TRUE(r[2].significant);
  // Four differences of one sign: the exact signed-rank p is 2/16 for each, x3 after Holm.
  EXPECT_DOUBLE_EQ(r[0].p_signed_rank, 2.0 / 16);
  EXPECT_DOUBLE_EQ(r[0].p_signed_rank_holm, std::min(1.0, 3 * 2.0 / 16));
}

// Whatever the contrasts, an interval excludes 0 exactly where Holm rejects, and once Holm
// retains one, no later one (by p) is rejected, even one whose p lies below its own step.
TEST(Statistics, HolmIntervalsAgreeWithTheirDecisions) {
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0, 1);
  std::uniform_real_distribution<double> effect(-1.5, 1.5);
  int rejected = 0, retained = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<std::string> names = {"a", "b", "c", "d", "e", "f"};
    std::vector<Contrast> c;
    for (int i = 0; i < 1 + trial % 6; ++i) {
      const double mu = effect(rng);
      std::vector<double> d;
      for (int s = 0; s < 3 + trial % 5; ++s) d.push_back(mu + noise(rng));
      c.push_back({names[static_cast<size_t>(i)], d});
    }
    for (const ContrastResult& r : holm_contrasts(c, 0.05)) {
      EXPECT_EQ(r.low > 0 || r.high < 0, r.significant) << "trial " << trial << " " << r.name;
      EXPECT_EQ(r.significant, r.p_holm <= 0.05);
      EXPECT_GE(r.level, 0.05 / static_cast<double>(c.size()) - 1e-15);
      EXPECT_LE(r.simultaneous_low, r.low + 1e-12) << "Bonferroni's interval is the widest";
      EXPECT_GE(r.simultaneous_high, r.high - 1e-12);
      (r.significant ? rejected : retained)++;
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(retained, 100);
}

TEST(Statistics, SuccessRateOfBimodalOutcomes) {
  // Five seeds of one column: two learned (>= 0.9), three stayed low.
  const SuccessSummary s = success_summary({0.915, 0.394, 0.287, 0.975, 0.442}, 0.9);
  EXPECT_EQ(s.n, 5);
  EXPECT_EQ(s.successes, 2);
  EXPECT_DOUBLE_EQ(s.rate, 0.4);
  // scipy.stats.binomtest(2, 5).proportion_ci(method="exact").
  EXPECT_NEAR(s.rate_low, 0.05274495052631566, 1e-12);
  EXPECT_NEAR(s.rate_high, 0.8533672003653274, 1e-12);
  EXPECT_EQ(s.given_success.n, 2);
  EXPECT_NEAR(s.given_success.mean, 0.945, 1e-15);
  EXPECT_NEAR(s.given_success.half, 12.706 * (0.03 * std::sqrt(2.0)) / std::sqrt(2.0), 1e-12);
  EXPECT_EQ(s.given_failure.n, 3);
  EXPECT_NEAR(s.given_failure.mean, (0.394 + 0.287 + 0.442) / 3, 1e-15);
  // No success and every success: one bound in closed form, (alpha / 2)^(1 / n).
  const SuccessSummary none = success_summary({0.3, 0.2, 0.4, 0.1, 0.5}, 0.9);
  EXPECT_EQ(none.rate_low, 0);
  EXPECT_NEAR(none.rate_high, 1 - std::pow(0.025, 0.2), 1e-12);
  EXPECT_EQ(none.given_success.n, 0);
  const SuccessSummary all = success_summary({0.95, 0.91, 0.99}, 0.9);
  EXPECT_NEAR(all.rate_low, std::pow(0.025, 1.0 / 3), 1e-12);
  EXPECT_EQ(all.rate_high, 1);
  // The threshold itself counts as a success; scipy's interval for 1 of 10.
  const SuccessSummary one = success_summary({0.9, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0.9);
  EXPECT_EQ(one.successes, 1);
  EXPECT_NEAR(one.rate_low, 0.0025285785444625728, 1e-12);
  EXPECT_NEAR(one.rate_high, 0.44501611702819543, 1e-12);
  const SuccessSummary empty = success_summary({}, 0.5);
  EXPECT_EQ(empty.n, 0);
  EXPECT_EQ(empty.rate_low, 0);
  EXPECT_EQ(empty.rate_high, 1);
}

// A hand-made comparison: A has seeds 2, 1, 3 (in that run order; seed 2 lacks column 1), B has
// seeds 1 and 2.
CompareResults two_encodings() {
  CompareResults r;
  r.encodings = {"A", "B"};
  r.seeds = {1, 2, 3};
  r.sizes = {28, 42};
  r.train_size = 28;
  auto run = [](const std::string& e, uint64_t seed, std::vector<double> acc) {
    RunResult x;
    x.encoding = e;
    x.seed = seed;
    x.accuracy = std::move(acc);
    return x;
  };
  r.runs = {run("A", 2, {0.80}), run("A", 1, {0.90, 0.70}), run("A", 3, {0.85, 0.60}),
            run("B", 1, {0.70, 0.65}), run("B", 2, {0.75, 0.50})};
  return r;
}

TEST(Statistics, PairedAccuracyDifferencesBySeed) {
  const CompareResults r = two_encodings();
  const std::vector<double> d0 = paired_accuracy_differences(r, "A", "B", 0);
  ASSERT_EQ(d0.size(), 2u) << "seed 3 has no partner";
  EXPECT_NEAR(d0[0], 0.80 - 0.75, 1e-15) << "in A's run order: seed 2 first";
  EXPECT_NEAR(d0[1], 0.90 - 0.70, 1e-15);
  const std::vector<double> d1 = paired_accuracy_differences(r, "A", "B", 1);
  ASSERT_EQ(d1.size(), 1u) << "seed 2 of A lacks the column";
  EXPECT_NEAR(d1[0], 0.70 - 0.65, 1e-15);
  const std::vector<double> back = paired_accuracy_differences(r, "B", "A", 0);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_NEAR(back[0], 0.70 - 0.90, 1e-15);
  EXPECT_EQ(accuracies_at(r, "A", 1), (std::vector<double>{0.70, 0.60}));
  EXPECT_TRUE(paired_accuracy_differences(r, "A", "C", 0).empty());

  // The report's rows are these differences' intervals, and the summary their accuracies'.
  const std::vector<PairedRow> rows = paired_differences(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].encoding, "B");
  EXPECT_EQ(rows[0].diff[0].n, 2);
  EXPECT_NEAR(rows[0].diff[0].mean, -(0.05 + 0.20) / 2, 1e-15);
  const std::vector<SummaryRow> summary = summarize(r);
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[0].runs, 3);
  EXPECT_NEAR(summary[0].mean[0], (0.80 + 0.90 + 0.85) / 3, 1e-15);
  EXPECT_NEAR(summary[0].mean[1], 0.65, 1e-15) << "the run without the column is left out";
  EXPECT_NEAR(summary[0].ci95[1], 12.706 * sample_stddev({0.70, 0.60}) / std::sqrt(2.0), 1e-15);
}

TEST(Statistics, BadInputsAreRefused) {
  EXPECT_THROW(t_test({0.1}), std::invalid_argument);
  EXPECT_THROW(holm_adjust({0.5, 1.5}), std::invalid_argument);
  EXPECT_THROW(holm_adjust({std::nan("")}), std::invalid_argument);
  EXPECT_THROW(wilcoxon_signed_rank({0.1, std::nan("")}), std::invalid_argument);
  // A contrast of fewer than 2 pairs is not testable yet (a study still running): it is kept,
  // untested, and still counts in the others' adjustment.
  const std::vector<ContrastResult> pending =
      holm_contrasts({{"ok", {0.1, 0.2, 0.15}}, {"rope-mixed - learned1d @56", {0.3}}, {"none", {}}});
  ASSERT_EQ(pending.size(), 3u);
  EXPECT_TRUE(pending[0].testable);
  EXPECT_NEAR(pending[0].p_holm, std::min(1.0, 3 * pending[0].p), 1e-12);
  EXPECT_FALSE(pending[1].testable);
  EXPECT_EQ(pending[1].n, 1);
  EXPECT_DOUBLE_EQ(pending[1].mean, 0.3);
  EXPECT_TRUE(std::isnan(pending[1].low) && std::isnan(pending[1].simultaneous_high));
  EXPECT_FALSE(pending[1].significant);
  EXPECT_EQ(pending[1].p_holm, 1.0);
  EXPECT_FALSE(pending[2].testable);
  EXPECT_TRUE(std::isnan(pending[2].mean));
  EXPECT_THROW(holm_contrasts({{"a", {0.1, 0.2}}}, 0), std::invalid_argument);
  EXPECT_THROW(success_summary({0.5, std::nan("")}, 0.5), std::invalid_argument);
  EXPECT_THROW(success_summary({0.5}, std::nan("")), std::invalid_argument);
  EXPECT_THROW(student_t_quantile(0, 3), std::invalid_argument);
  EXPECT_THROW(student_t_quantile(1, 3), std::invalid_argument);
  EXPECT_THROW(student_t_quantile(0.5, 0), std::invalid_argument);
  EXPECT_THROW(student_t_cdf(std::nan(""), 3), std::invalid_argument);
  EXPECT_THROW(incomplete_beta(-1, 1, 0.5), std::invalid_argument);
  EXPECT_THROW(incomplete_beta(1, 1, 1.5), std::invalid_argument);
  EXPECT_THROW(beta_quantile(1.5, 1, 1), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
