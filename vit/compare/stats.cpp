// Statistics over the seeds of a comparison (see stats.h).
#include "vit/compare/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

namespace vitpe {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The continued fraction of I_x(a, b) (Numerical Recipes' betacf, modified Lentz), which
// converges fast for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-16;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 100000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < kEps) break;
  }
  return h;
}

// P(|T| >= |t|) for Student's t with df degrees of freedom, without the cancellation of
// 1 - cdf in the tails.
double t_two_sided_p(double t, double df) {
  if (std::isinf(t)) return 0;
  const double t2 = t * t;
  if (t2 < df) return 1 - incomplete_beta(0.5, df / 2, t2 / (df + t2));
  return incomplete_beta(df / 2, 0.5, df / (df + t2));
}

}  // namespace

// ---- distributions ------------------------------------------------------------------------------

double incomplete_beta(double a, double b, double x) {
  if (!(a > 0) || !(b > 0) || !(x >= 0 && x <= 1))
    throw std::invalid_argument("incomplete_beta: expected a > 0, b > 0 and x in [0, 1], found a " +
                                num(a) + ", b " + num(b) + ", x " + num(x));
  if (x == 0 || x == 1) return x;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1 - front * beta_continued_fraction(b, a, 1 - x) / b;
}

double beta_quantile(double p, double a, double b) {
  if (!(p >= 0 && p <= 1) || !(a > 0) || !(b > 0))
    throw std::invalid_argument("beta_quantile: expected p in [0, 1], a > 0 and b > 0, found p " +
                                num(p) + ", a " + num(a) + ", b " + num(b));
  if (p == 0 || p == 1) return p;
  // Bisection: I_x is increasing in x, and halving until no double lies between the bounds
  // gives full relative precision also for quantiles near 0.
  double lo = 0, hi = 1;
  for (int i = 0; i < 2000; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    (incomplete_beta(a, b, mid) < p ? lo : hi) = mid;
  }
  return lo + (hi - lo) / 2;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double student_t_cdf(double t, double df) {
  if (!(df > 0) || std::isnan(t))
    throw std::invalid_argument("student_t_cdf: expected df > 0 and a number t, found df " +
                                num(df) + ", t " + num(t));
  const double half_tail = t_two_sided_p(t, df) / 2;
  return t >= 0 ? 1 - half_tail : half_tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df > 0))
    throw std::invalid_argument("student_t_quantile: expected p in (0, 1) and df > 0, found p " +
                                num(p) + ", df " + num(df));
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  if (p == 0.5) return 0;
  // The upper tail 2 (1 - p) = I_x(df / 2, 1 / 2) at x = df / (df + t^2); near the centre the
  // complementary form, 2 p - 1 = I_y(1 / 2, df / 2) at y = t^2 / (df + t^2), keeps precision.
  const double tail = 2 * (1 - p);
  if (tail < 0.5) {
    const double x = beta_quantile(tail, df / 2, 0.5);
    return std::sqrt(df * (1 - x) / x);
  }
  const double y = beta_quantile(2 * p - 1, 0.5, df / 2);
  return std::sqrt(df * y / (1 - y));
}

double t_quantile_975(int64_t df) {
  if (df < 1)
    throw std::invalid_argument("t_quantile_975: df must be >= 1, found " + std::to_string(df));
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df <= 30) return table[df - 1];
  // Cornish-Fisher expansion of t around the normal quantile z (error < 1e-4 for df > 30).
  const double z = 1.959963984540054, n = static_cast<double>(df);
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * n * n * n);
}

// ---- one sample ---------------------------------------------------------------------------------

double sample_mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double sample_stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double m = sample_mean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

Interval mean_interval(const std::vector<double>& v) {
  Interval i;
  i.n = static_cast<int64_t>(v.size());
  i.mean = sample_mean(v);
  i.stddev = sample_stddev(v);
  if (i.n >= 2) i.half = t_quantile_975(i.n - 1) * i.stddev / std::sqrt(static_cast<double>(i.n));
  return i;
}

TTest t_test(const std::vector<double>& v) {
  if (v.size() < 2)
    throw std::invalid_argument("t_test: needs at least 2 values, found " +
                                std::to_string(v.size()));
  TTest r;
  r.n = static_cast<int64_t>(v.size());
  r.mean = sample_mean(v);
  r.stddev = sample_stddev(v);
  if (r.stddev == 0) {
    r.t = r.mean == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), r.mean);
    r.p = r.mean == 0 ? 1 : 0;
    return r;
  }
  r.t = r.mean / (r.stddev / std::sqrt(static_cast<double>(r.n)));
  r.p = t_two_sided_p(r.t, static_cast<double>(r.n - 1));
  return r;
}

SignedRankTest wilcoxon_signed_rank(const std::vector<double>& d) {
  SignedRankTest r;
  std::vector<double> nonzero;
  for (double x : d) {
    if (std::isnan(x)) throw std::invalid_argument("wilcoxon_signed_rank: a difference is NaN");
    if (x == 0) {
      ++r.zeros;
    } else {
      nonzero.push_back(x);
    }
  }
  const int64_t n = static_cast<int64_t>(nonzero.size());
  r.n = n;
  if (n == 0) return r;  // nothing against symmetry: p = 1
  std::vector<size_t> order(nonzero.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::fabs(nonzero[a]) < std::fabs(nonzero[b]);
  });
  // Twice the ranks (tied magnitudes share the mean of their ranks, a multiple of 1/2), so the
  // exact distribution below runs over whole numbers; and the tie groups' sizes.
  std::vector<int64_t> rank2(nonzero.size());
  std::vector<int64_t> ties;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && std::fabs(nonzero[order[j + 1]]) == std::fabs(nonzero[order[i]]))
      ++j;
    for (size_t k = i; k <= j; ++k) rank2[order[k]] = static_cast<int64_t>(i + 1 + j + 1);
    ties.push_back(static_cast<int64_t>(j - i + 1));
    i = j + 1;
  }
  int64_t w2 = 0, total2 = 0;
  for (size_t i = 0; i < nonzero.size(); ++i) {
    total2 += rank2[i];
    if (nonzero[i] > 0) w2 += rank2[i];
  }
  r.w_plus = static_cast<double>(w2) / 2;
  r.w_minus = static_cast<double>(total2 - w2) / 2;
  if (n <= kSignedRankExactMax) {
    // Under the null every sign pattern of the ranks is equally likely: count the patterns per
    // value of 2 W+ (at most 2^50 each, exact in a double).
    std::vector<double> count(static_cast<size_t>(total2) + 1, 0.0);
    count[0] = 1;
    for (int64_t r2 : rank2)
      for (int64_t w = total2; w >= r2; --w) count[w] += count[w - r2];
    double below = 0, above = 0;
    for (int64_t w = 0; w <= total2; ++w) {
      if (w <= w2) below += count[w];
      if (w >= w2) above += count[w];
    }
    const double all = std::ldexp(1.0, static_cast<int>(n));
    r.p = std::min(1.0, 2 * std::min(below, above) / all);
    r.exact = true;
    return r;
  }
  const double nn = static_cast<double>(n);
  double var = nn * (nn + 1) * (2 * nn + 1) / 24;
  for (int64_t t : ties) var -= static_cast<double>(t * t * t - t) / 48;
  const double z = (r.w_plus - nn * (nn + 1) / 4) / std::sqrt(var);
  r.p = std::min(1.0, std::erfc(std::fabs(z) / std::sqrt(2.0)));
  r.exact = false;
  return r;
}

// ---- many contrasts -----------------------------------------------------------------------------

namespace {
// The indices of p in increasing order of their values (ties in input order).
std::vector<size_t> ascending(const std::vector<double>& p) {
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  return order;
}
}  // namespace

std::vector<double> holm_adjust(const std::vector<double>& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (!(p[i] >= 0 && p[i] <= 1))
      throw std::invalid_argument("holm_adjust: expected p-values in [0, 1], found " + num(p[i]) +
                                  " at index " + std::to_string(i));
  }
  const std::vector<size_t> order = ascending(p);
  std::vector<double> adjusted(p.size());
  const double m = static_cast<double>(p.size());
  double running = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    running = std::max(running, std::min(1.0, (m - static_cast<double>(j)) * p[order[j]]));
    adjusted[order[j]] = running;
  }
  return adjusted;
}

std::vector<ContrastResult> holm_contrasts(const std::vector<Contrast>& contrasts, double alpha) {
  if (!(alpha > 0 && alpha < 1))
    throw std::invalid_argument("holm_contrasts: expected alpha in (0, 1), found " + num(alpha));
  const size_t m = contrasts.size();
  std::vector<ContrastResult> out(m);
  std::vector<double> p(m), p_rank(m);
  for (size_t i = 0; i < m; ++i) {
    const Contrast& c = contrasts[i];
    ContrastResult& r = out[i];
    r.name = c.name;
    if (c.differences.size() < 2) {
      r.testable = false;
      r.n = static_cast<int64_t>(c.differences.size());
      r.mean = c.differences.empty() ? std::nan("") : c.differences[0];
      r.stddev = std::nan("");
      p[i] = p_rank[i] = 1;
      continue;
    }
    const TTest t = t_test(c.differences);
    r.n = t.n;
    r.mean = t.mean;
    r.stddev = t.stddev;
    r.p = p[i] = t.p;
    r.p_signed_rank = p_rank[i] = wilcoxon_signed_rank(c.differences).p;
  }
  const std::vector<double> p_holm = holm_adjust(p), p_rank_holm = holm_adjust(p_rank);
  // The level of each step of Holm's procedure; once one contrast is retained, every later one
  // is judged at that step's level, so no interval excludes 0 where Holm retains.
  std::vector<double> level(m);
  bool rejecting = true;
  double retained_level = 0;
  const std::vector<size_t> order = ascending(p);
  for (size_t j = 0; j < m; ++j) {
    const double step = alpha / static_cast<double>(m - j);
    if (rejecting && p[order[j]] <= step) {
      level[order[j]] = step;
      continue;
    }
    if (rejecting) retained_level = step, rejecting = false;
    level[order[j]] = retained_level;
  }
  for (size_t i = 0; i < m; ++i) {
    ContrastResult& r = out[i];
    r.p_holm = p_holm[i];
    r.p_signed_rank_holm = p_rank_holm[i];
    r.level = level[i];
    r.significant = r.testable && r.p_holm <= alpha;
    if (!r.testable) {
      r.low = r.high = r.simultaneous_low = r.simultaneous_high = std::nan("");
      continue;
    }
    const double df = static_cast<double>(r.n - 1);
    const double se = r.stddev / std::sqrt(static_cast<double>(r.n));
    const double half = student_t_quantile(1 - r.level / 2, df) * se;
    const double sim = student_t_quantile(1 - alpha / (2 * static_cast<double>(m)), df) * se;
    r.low = r.mean - half;
    r.high = r.mean + half;
    r.simultaneous_low = r.mean - sim;
    r.simultaneous_high = r.mean + sim;
  }
  return out;
}

// ---- bimodal outcomes ---------------------------------------------------------------------------

SuccessSummary success_summary(const std::vector<double>& values, double threshold, double alpha) {
  if (!std::isfinite(threshold) || !(alpha > 0 && alpha < 1))
    throw std::invalid_argument(
        "success_summary: expected a finite threshold and alpha in (0, 1), found threshold " +
        num(threshold) + ", alpha " + num(alpha));
  SuccessSummary s;
  s.threshold = threshold;
  std::vector<double> good, bad;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]))
      throw std::invalid_argument("success_summary: expected finite values, found " +
                                  num(values[i]) + " at index " + std::to_string(i));
    (values[i] >= threshold ? good : bad).push_back(values[i]);
  }
  s.n = static_cast<int64_t>(values.size());
  s.successes = static_cast<int64_t>(good.size());
  s.given_success = mean_interval(good);
  s.given_failure = mean_interval(bad);
  s.rate_high = 1;
  if (s.n == 0) return s;
  const double k = static_cast<double>(s.successes), n = static_cast<double>(s.n);
  s.rate = k / n;
  s.rate_low = s.successes == 0 ? 0 : beta_quantile(alpha / 2, k, n - k + 1);
  s.rate_high = s.successes == s.n ? 1 : beta_quantile(1 - alpha / 2, k + 1, n - k);
  return s;
}

// ---- over a comparison's results ----------------------------------------------------------------

std::vector<double> accuracies_at(const CompareResults& r, const std::string& encoding, size_t k) {
  std::vector<double> v;
  for (const RunResult& run : r.runs)
    if (run.encoding == encoding && k < run.accuracy.size()) v.push_back(run.accuracy[k]);
  return v;
}

namespace {
// The runs of an encoding by seed (the last one where a seed repeats).
std::map<uint64_t, const RunResult*> runs_by_seed(const CompareResults& r,
                                                  const std::string& encoding) {
  std::map<uint64_t, const RunResult*> by_seed;
  for (const RunResult& run : r.runs)
    if (run.encoding == encoding) by_seed[run.seed] = &run;
  return by_seed;
}

// The accuracy of one run at column k (NaN when the run lacks it).
double accuracy_at(const RunResult& run, size_t k) {
  return k < run.accuracy.size() ? run.accuracy[k] : std::nan("");
}

std::vector<double> paired_with(const CompareResults& r, const std::string& encoding,
                                const std::map<uint64_t, const RunResult*>& against, size_t k) {
  std::vector<double> d;
  for (const RunResult& run : r.runs) {
    if (run.encoding != encoding) continue;
    auto it = against.find(run.seed);
    if (it == against.end()) continue;
    const double a = accuracy_at(run, k), b = accuracy_at(*it->second, k);
    if (!std::isnan(a) && !std::isnan(b)) d.push_back(a - b);
  }
  return d;
}
}  // namespace

std::vector<double> paired_accuracy_differences(const CompareResults& r,
                                                const std::string& encoding,
                                                const std::string& against, size_t k) {
  return paired_with(r, encoding, runs_by_seed(r, against), k);
}

std::vector<double> column_means(const CompareResults& r, const std::string& encoding,
                                 std::vector<double> RunResult::*field) {
  std::vector<double> means;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    std::vector<double> v;
    for (const RunResult& run : r.runs)
      if (run.encoding == encoding && k < (run.*field).size()) v.push_back((run.*field)[k]);
    means.push_back(v.empty() ? std::nan("") : sample_mean(v));
  }
  return means;
}

std::vector<std::pair<int64_t, double>> epoch_means(const CompareResults& r,
                                                    const std::string& encoding,
                                                    double EpochRecord::*field, double unit) {
  std::map<int64_t, std::vector<double>> by_epoch;
  for (const RunResult& run : r.runs) {
    if (run.encoding != encoding) continue;
    for (const EpochRecord& h : run.history) by_epoch[h.epoch].push_back(h.*field * unit);
  }
  std::vector<std::pair<int64_t, double>> means;
  for (const auto& [epoch, v] : by_epoch) means.emplace_back(epoch, sample_mean(v));
  return means;
}

std::vector<double> attention_distance_by_block(const CompareResults& r,
                                                const std::string& encoding, size_t k) {
  std::vector<std::vector<double>> per_block;
  for (const RunResult& run : r.runs) {
    if (run.encoding != encoding || k >= run.attention_distance.size()) continue;
    const auto& blocks = run.attention_distance[k];
    if (per_block.size() < blocks.size()) per_block.resize(blocks.size());
    for (size_t b = 0; b < blocks.size(); ++b)
      per_block[b].insert(per_block[b].end(), blocks[b].begin(), blocks[b].end());
  }
  std::vector<double> means;
  for (const auto& v : per_block) means.push_back(v.empty() ? std::nan("") : sample_mean(v));
  return means;
}

double attention_entropy_mean(const CompareResults& r, const std::string& encoding, size_t k) {
  std::vector<double> v;
  for (const RunResult& run : r.runs) {
    if (run.encoding != encoding || k >= run.attention_entropy.size()) continue;
    v.insert(v.end(), run.attention_entropy[k].begin(), run.attention_entropy[k].end());
  }
  return v.empty() ? std::nan("") : sample_mean(v);
}

PrimarySpec parse_primary(const CompareResults& r, const std::string& text) {
  const size_t vs = text.find(" vs "), at = text.find(" @ ");
  if (vs == std::string::npos || at == std::string::npos || at < vs) {
    throw std::invalid_argument("primary contrast '" + text +
                                "': expected 'A vs B @ COLUMN' (e.g. 'rope-axial vs learned1d @ "
                                "56 zoom extrap')");
  }
  auto trim = [](std::string t) {
    const size_t b = t.find_first_not_of(' '), e = t.find_last_not_of(' ');
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  };
  PrimarySpec p;
  p.a = trim(text.substr(0, vs));
  p.b = trim(text.substr(vs + 4, at - vs - 4));
  const std::string label = trim(text.substr(at + 3));
  for (const std::string* e : {&p.a, &p.b}) {
    if (std::find(r.encodings.begin(), r.encodings.end(), *e) == r.encodings.end()) {
      std::string known;
      for (const std::string& k : r.encodings) known += (known.empty() ? "" : ", ") + k;
      throw std::invalid_argument("primary contrast '" + text + "': '" + *e +
                                  "' is not an encoding of the study (" + known + ")");
    }
  }
  std::string labels;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    if (column_label(r, k) == label) {
      p.column = k;
      return p;
    }
    labels += (labels.empty() ? "'" : ", '") + column_label(r, k) + "'";
  }
  throw std::invalid_argument("primary contrast '" + text + "': no column '" + label +
                              "' (the columns: " + labels + ")");
}

std::vector<ContrastResult> primary_contrasts(const CompareResults& r, double alpha) {
  if (r.primary.empty()) return {};
  std::vector<Contrast> list;
  for (const std::string& text : r.primary) {
    const PrimarySpec p = parse_primary(r, text);
    Contrast c{text, paired_accuracy_differences(r, p.a, p.b, p.column)};
    for (double& d : c.differences) d *= 100;  // accuracy points
    list.push_back(std::move(c));
  }
  return holm_contrasts(list, alpha);
}

PlateauSummary plateau(const CompareResults& r, const std::string& encoding, double points) {
  PlateauSummary s;
  for (const RunResult& run : r.runs) {
    if (run.encoding != encoding || run.history.size() < 2) continue;
    const double change = 100 * (run.history.back().test_acc -
                                 run.history[run.history.size() - 2].test_acc);
    ++s.runs;
    if (std::fabs(change) <= points) ++s.plateaued;
    s.largest_change = std::max(s.largest_change, std::fabs(change));
  }
  return s;
}

std::vector<SummaryRow> summarize(const CompareResults& r) {
  std::vector<SummaryRow> rows;
  for (const std::string& enc : r.encodings) {
    SummaryRow row;
    row.encoding = enc;
    std::vector<double> times;
    for (const RunResult& run : r.runs) {
      if (run.encoding != enc) continue;
      ++row.runs;
      row.params_added = run.params_added;
      times.push_back(run.train_seconds);
    }
    if (row.runs == 0) continue;  // not finished yet: no row, rather than a row of zeros
    row.train_seconds = sample_mean(times);
    for (size_t k = 0; k < r.sizes.size(); ++k) {
      const Interval i = mean_interval(accuracies_at(r, enc, k));
      row.mean.push_back(i.mean);
      row.stddev.push_back(i.stddev);
      row.ci95.push_back(i.half);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string reference_encoding(const CompareResults& r) {
  if (!r.reference.empty()) return r.reference;
  return r.encodings.empty() ? "" : r.encodings.front();
}

std::vector<PairedRow> paired_differences(const CompareResults& r) {
  const std::string ref = reference_encoding(r);
  const std::map<uint64_t, const RunResult*> ref_runs = runs_by_seed(r, ref);
  std::vector<PairedRow> rows;
  if (ref_runs.empty()) return rows;
  for (const std::string& enc : r.encodings) {
    if (enc == ref) continue;
    bool shares_a_seed = false;
    for (const RunResult& run : r.runs)
      shares_a_seed |= run.encoding == enc && ref_runs.count(run.seed) > 0;
    if (!shares_a_seed) continue;
    PairedRow row;
    row.encoding = enc;
    for (size_t k = 0; k < r.sizes.size(); ++k)
      row.diff.push_back(mean_interval(paired_with(r, enc, ref_runs, k)));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace vitpe
