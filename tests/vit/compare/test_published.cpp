// The published studies' figures, recomputed from the committed results.json files with the
// library's own statistics: every number README.md and docs/results/resolution-studies.md quote
// from a second-edition arm is formatted here from its file and must appear in the text as
// written, and every interval README.md quotes must be one of them. A figure edited by hand, a
// results.json replaced without its text, or an interval quoted with no check here fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "vit/compare/merge.h"
#include "vit/compare/report.h"
#include "vit/compare/stats.h"

namespace vitpe {
namespace {

const std::string kDocs = std::string(VITPE_SOURCE_DIR) + "/docs/results/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string format(const char* f, ...) {
  char buf[512];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof buf, f, args);
  va_end(args);
  return buf;
}

// Several arms' results.json (relative to docs/results/) merged as `vitpe report --tag` does.
CompareResults merged(const std::vector<std::string>& files, const std::vector<std::string>& tags) {
  CompareResults r;
  for (size_t i = 0; i < files.size(); ++i) {
    CompareResults one = parse_results_json(slurp(kDocs + files[i]));
    tag_encodings(one, tags[i]);
    if (i == 0) {
      r = std::move(one);
    } else {
      merge_results(r, one, tags[0], tags[i], files[i]);
    }
  }
  return r;
}

size_t column(const CompareResults& r, const std::string& label) {
  for (size_t k = 0; k < r.sizes.size(); ++k)
    if (column_label(r, k) == label) return k;
  ADD_FAILURE() << "no column '" << label << "'";
  return 0;
}

// An encoding's mean accuracy in % at a column, over its runs.
double mean_at(const CompareResults& r, const std::string& encoding, const std::string& label) {
  const std::vector<double> a = accuracies_at(r, encoding, column(r, label));
  EXPECT_FALSE(a.empty()) << "no runs of " << encoding;
  double sum = 0;
  for (double v : a) sum += v;
  return a.empty() ? std::nan("") : 100 * sum / static_cast<double>(a.size());
}

// Several encodings' mean accuracies in % at a column.
std::vector<double> means_at(const CompareResults& r, const std::vector<std::string>& encodings,
                             const std::string& label) {
  std::vector<double> m;
  for (const std::string& e : encodings) m.push_back(mean_at(r, e, label));
  return m;
}

// The range of some figures as the prose quotes it, whole numbers: "41-44" (one number when
// both ends round alike).
std::string span(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const std::string a = format("%.0f", *lo), b = format("%.0f", *hi);
  return a == b ? a : a + "-" + b;
}

// "+16.1 [+3.8, +28.5]*": a Holm contrast as the tables print it (* where it excludes 0).
std::string contrast_cell(const ContrastResult& c) {
  return format("%+.1f [%+.1f, %+.1f]%s", c.mean, c.low, c.high, c.significant ? "*" : "");
}

// "2/5": the runs of a kind that had levelled off, as the tables print it.
std::string levelled(const PlateauSummary& p) {
  return format("%lld/%lld", static_cast<long long>(p.plateaued), static_cast<long long>(p.runs));
}

// A kind's row with the fixed and scale regimes side by side: "| `k` | 78.3 / 73.4 | ... |" over
// the columns, then both regimes' levelled-off counts, "| 1/3, 1/3 |".
std::string fixed_scale_row(const CompareResults& r, const std::string& k,
                            const std::vector<std::string>& columns) {
  std::string row = "| `" + k + "` |";
  for (const std::string& c : columns)
    row += format(" %.1f / %.1f |", mean_at(r, k + "@fixed", c), mean_at(r, k + "@scale", c));
  return row + " " + levelled(plateau(r, k + "@fixed")) + ", " +
         levelled(plateau(r, k + "@scale")) + " |";
}

struct Quote {
  std::string doc;   // relative to the source tree
  std::string text;  // as it must appear there
};

// The regime pilot: 4 kinds, fixed size against scale augmentation, four contrasts declared
// with the report.
std::vector<Quote> regime_pilot() {
  const std::string dir = "resolution-fmnist-regimes/";
  CompareResults r =
      merged({dir + "fixed/results.json", dir + "scale/results.json"}, {"fixed", "scale"});
  const std::vector<std::string> kinds = {"learned1d", "sincos2d", "rope-axial", "rope-mixed"};
  for (const std::string& k : kinds)
    r.primary.push_back(k + "@scale vs " + k + "@fixed @ 56 zoom extrap");
  const std::vector<ContrastResult> c = primary_contrasts(r);
  EXPECT_EQ(c.size(), kinds.size());
  std::vector<Quote> q;
  const std::string studies = "docs/results/resolution-studies.md";
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& k = kinds[i];
    q.push_back(
        {studies, format("| `%s` | %.1f | %.1f | %s | %.1f / %.1f | %.1f / %.1f |", k.c_str(),
                         mean_at(r, k + "@fixed", "56 zoom extrap"),
                         mean_at(r, k + "@scale", "56 zoom extrap"), contrast_cell(c[i]).c_str(),
                         mean_at(r, k + "@fixed", "56 zoom interp"),
                         mean_at(r, k + "@scale", "56 zoom interp"), mean_at(r, k + "@fixed", "28"),
                         mean_at(r, k + "@scale", "28"))});
    EXPECT_NEAR(c[i].p_signed_rank, 0.0625, 1e-9) << k;  // "Wilcoxon's p is 0.0625 for all four"
  }
  // resolution-studies.md: the rotary kinds' and learned1d's gains significant, sincos2d's not.
  EXPECT_TRUE(c[0].significant && c[2].significant && c[3].significant);
  EXPECT_FALSE(c[1].significant);
  // Extrapolated RoPE with scale augmentation against the same models interpolated.
  auto range = [&](const std::string& label) {
    return span(means_at(r, {"rope-axial@scale", "rope-mixed@scale"}, label)) + " %";
  };
  q.push_back({studies, "reaches " + range("56 zoom extrap") + ", against " +
                            range("56 zoom interp") + " interpolated"});
  return q;
}

// The decisive arm: 7 kinds x 5 seeds per regime (fixed size, scale augmentation,
// multi-resolution batches), every policy and FlexiViT's patch resize at 56 px, two contrasts
// declared in each arm's command and six across the arms (declared together, Holm over six).
std::vector<Quote> decisive_arm() {
  const std::string dir = "resolution-fmnist-decisive/",
                    studies = "docs/results/resolution-studies.md";
  const std::vector<std::string> arms = {"fixed", "scale", "multires"};
  std::vector<std::string> files;
  for (const std::string& a : arms) files.push_back(dir + a + "/results.json");
  CompareResults r = merged(files, arms);
  std::vector<Quote> q;
  const std::vector<std::string> kinds = {"none",       "learned1d",  "sincos2d", "relbias",
                                          "rope-axial", "rope-mixed", "peg"};
  const std::vector<std::string> columns = {"28",
                                            "56 zoom interp",
                                            "56 zoom extrap",
                                            "56 zoom ntk",
                                            "56 zoom centre",
                                            "56 zoom patch",
                                            "56 canvas interp"};
  for (const std::string& k : kinds) {
    // The fixed and scale regimes side by side, then the multi-resolution regime's own table.
    std::string multi = "| `" + k + "` |";
    for (const std::string& c : columns) multi += format(" %.1f |", mean_at(r, k + "@multires", c));
    q.push_back({studies, fixed_scale_row(r, k, columns)});
    q.push_back({studies, multi + " " + levelled(plateau(r, k + "@multires")) + " |"});
  }
  // Each arm's own declared contrasts (Holm over the two in its file), as one row per contrast.
  std::vector<std::vector<ContrastResult>> own;
  for (const std::string& f : files)
    own.push_back(primary_contrasts(parse_results_json(slurp(kDocs + f))));
  for (size_t i = 0; i < own[0].size(); ++i) {
    q.push_back({studies, format("| %s | %s | %s | %s |", own[0][i].name.c_str(),
                                 contrast_cell(own[0][i]).c_str(), contrast_cell(own[1][i]).c_str(),
                                 contrast_cell(own[2][i]).c_str())});
  }
  // Across the arms, as declared while the fixed arm ran: scale against fixed for the two rotary
  // kinds, multi-resolution against fixed for four kinds, extrapolated at 2x, Holm over the six.
  r.primary = {"rope-axial@scale vs rope-axial@fixed @ 56 zoom extrap",
               "rope-mixed@scale vs rope-mixed@fixed @ 56 zoom extrap",
               "rope-axial@multires vs rope-axial@fixed @ 56 zoom extrap",
               "rope-mixed@multires vs rope-mixed@fixed @ 56 zoom extrap",
               "learned1d@multires vs learned1d@fixed @ 56 zoom extrap",
               "sincos2d@multires vs sincos2d@fixed @ 56 zoom extrap"};
  const std::vector<ContrastResult> across = primary_contrasts(r);
  for (const ContrastResult& c : across) {
    q.push_back({studies, format("| %s | %s | %.3g |", c.name.c_str(), contrast_cell(c).c_str(),
                                 c.p_signed_rank)});
  }
  EXPECT_TRUE(across[0].significant && across[1].significant);
  EXPECT_TRUE(own[0][1].significant && !own[0][0].significant);
  // The README's sentences, each figure as the files give it.
  const std::string readme = "README.md";
  q.push_back({readme, format("adds %.1f points to `rope-mixed` [%+.1f, %+.1f] and %.1f to "
                              "`rope-axial` [%+.1f, %+.1f]",
                              across[1].mean, across[1].low, across[1].high, across[0].mean,
                              across[0].low, across[0].high)});
  // The two rotary kinds' range in an arm, "41-44 %" (one number when both round alike).
  auto range = [&](const std::string& arm, const std::string& label) {
    return span(means_at(r, {"rope-axial@" + arm, "rope-mixed@" + arm}, label)) + " %";
  };
  q.push_back({readme, range("scale", "56 zoom extrap") + " and " +
                           range("multires", "56 zoom extrap") + ", against " +
                           span(means_at(r,
                                         {"rope-axial@scale", "rope-mixed@scale",
                                          "rope-axial@multires", "rope-mixed@multires"},
                                         "56 zoom interp")) +
                           " % interpolated"});
  q.push_back(
      {readme, format("`--train-sizes 20,28,36` adds %.1f [%+.1f, %+.1f] and %.1f [%+.1f, "
                      "%+.1f], as much to `sincos2d` (%.1f [%+.1f, %+.1f])",
                      across[3].mean, across[3].low, across[3].high, across[2].mean, across[2].low,
                      across[2].high, across[5].mean, across[5].low, across[5].high)});
  q.push_back({readme, format("(by %.1f [%+.1f, %+.1f]; at the fixed size %+.1f [%+.1f, %+.1f])",
                              own[2][0].mean, own[2][0].low, own[2][0].high, own[0][0].mean,
                              own[0][0].low, own[0][0].high)});
  {
    std::vector<double> gains;
    for (const std::string k : {"learned1d", "relbias", "peg"}) {
      gains.push_back(mean_at(r, k + "@multires", "56 zoom interp") -
                      mean_at(r, k + "@fixed", "56 zoom interp"));
    }
    q.push_back({readme, "`learned1d`, `relbias` and `peg` by " + span(gains) + " points"});
  }
  q.push_back({studies, "Extrapolated RoPE reaches " + range("scale", "56 zoom extrap") +
                            ", against " + range("scale", "56 zoom interp") +
                            " interpolated, with scale augmentation, and reaches " +
                            range("multires", "56 zoom extrap") + ", against " +
                            range("multires", "56 zoom interp") + " interpolated, with"});
  q.push_back({studies, format("by %.1f points [%+.1f, %+.1f]); interpolated it leads",
                               own[2][0].mean, own[2][0].low, own[2][0].high)});
  q.push_back({studies, format("minus `learned1d`: %+.1f [%+.1f, %+.1f])", own[2][1].mean,
                               own[2][1].low, own[2][1].high)});
  EXPECT_TRUE(own[2][0].significant && own[2][1].significant && own[2][1].mean < 0);
  // Multi-resolution batches lift the fixed formulas, not the learned table (Holm over six).
  EXPECT_TRUE(across[2].significant && across[3].significant && across[5].significant);
  EXPECT_FALSE(across[4].significant);
  q.push_back({readme, format("holds extrapolated (%.1f %% against %.1f %% interpolated, %.1f %% "
                              "without it)",
                              mean_at(r, "relbias@scale", "56 zoom extrap"),
                              mean_at(r, "relbias@scale", "56 zoom interp"),
                              mean_at(r, "relbias@fixed", "56 zoom extrap"))});
  q.push_back({readme, format("(%.1f %% against %.1f %% extrapolated)",
                              mean_at(r, "rope-mixed@scale", "56 zoom ntk"),
                              mean_at(r, "rope-mixed@scale", "56 zoom extrap"))});
  q.push_back({readme, format("by %.1f points [%+.1f, %+.1f] at the fixed size", own[0][1].mean,
                              own[0][1].low, own[0][1].high)});
  int64_t fewest = 5, most = 0;
  for (const std::string& k : kinds) {
    for (const std::string& a : arms) {
      const PlateauSummary p = plateau(r, k + "@" + a);
      fewest = std::min(fewest, p.plateaued);
      most = std::max(most, p.plateaued);
    }
  }
  q.push_back({readme, format("%lld-%lld of 5 runs per kind and regime",
                              static_cast<long long>(fewest), static_cast<long long>(most))});
  return q;
}

// The fine-tuned-at-size arm: each kind's fixed-size 28 px models fine-tuned one epoch at 56 px
// (compare --init-runs), against the same models zero-shot at 56 px zoomed; the difference per
// kind paired by seed across the two files, the seven Holm-adjusted together.
std::vector<Quote> fine_tuned_arm() {
  const std::string dir = "resolution-fmnist-decisive/",
                    studies = "docs/results/resolution-studies.md";
  const CompareResults ft = parse_results_json(slurp(kDocs + dir + "fine-tuned/results.json"));
  const CompareResults zs = parse_results_json(slurp(kDocs + dir + "fixed/results.json"));
  const size_t tuned = column(ft, "56"), interp = column(zs, "56 zoom interp");
  auto accuracy = [](const CompareResults& r, const std::string& k, uint64_t seed, size_t col) {
    for (const RunResult& run : r.runs)
      if (run.encoding == k && run.seed == seed) return 100 * run.accuracy.at(col);
    ADD_FAILURE() << "no run " << k << " seed " << seed;
    return std::nan("");
  };
  std::vector<Contrast> list;
  for (const std::string& k : ft.encodings) {
    Contrast c{k, {}};
    for (uint64_t seed : ft.seeds)
      c.differences.push_back(accuracy(ft, k, seed, tuned) - accuracy(zs, k, seed, interp));
    list.push_back(std::move(c));
  }
  const std::vector<ContrastResult> c = holm_contrasts(list);
  std::vector<Quote> q;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string& k = ft.encodings[i];
    q.push_back({studies, format("| `%s` | %.1f | %.1f | %.1f | %s |", k.c_str(),
                                 mean_at(zs, k, "56 zoom interp"), mean_at(zs, k, "56 zoom extrap"),
                                 mean_at(ft, k, "56"), contrast_cell(c[i]).c_str())});
  }
  EXPECT_FALSE(c[2].significant) << "sincos2d";
  const double a = mean_at(ft, "rope-axial", "56"), m = mean_at(ft, "rope-mixed", "56");
  q.push_back(
      {"README.md", format("puts `learned1d` (%.1f %%) above the rotary kinds (%.1f-%.1f %%)",
                           mean_at(ft, "learned1d", "56"), std::min(a, m), std::max(a, m))});
  return q;
}

// The 14x14 grid arm: patch 2 at 28 px, 5 kinds x 3 seeds in two regimes (fixed size, scale
// augmentation), 56 px zoomed under both policies and patch resize; the decisive arm's two
// contrasts declared in each regime's command, and two across the regimes (Holm over two).
std::vector<Quote> grid14_arm() {
  const std::string dir = "resolution-fmnist-grid14/",
                    studies = "docs/results/resolution-studies.md";
  const std::vector<std::string> arms = {"fixed", "scale"};
  std::vector<std::string> files;
  for (const std::string& a : arms) files.push_back(dir + a + "/results.json");
  CompareResults r = merged(files, arms);
  std::vector<Quote> q;
  const std::vector<std::string> kinds = {"learned1d", "sincos2d", "relbias", "rope-axial",
                                          "rope-mixed"};
  const std::vector<std::string> columns = {"28", "56 zoom interp", "56 zoom extrap",
                                            "56 zoom patch"};
  for (const std::string& k : kinds) q.push_back({studies, fixed_scale_row(r, k, columns)});
  // Each regime's own declared contrasts (Holm over the two in its file), one row per contrast.
  std::vector<std::vector<ContrastResult>> own;
  for (const std::string& f : files)
    own.push_back(primary_contrasts(parse_results_json(slurp(kDocs + f))));
  for (size_t i = 0; i < own[0].size(); ++i) {
    q.push_back(
        {studies, format("| %s (14x14) | %s | %s |", own[0][i].name.c_str(),
                         contrast_cell(own[0][i]).c_str(), contrast_cell(own[1][i]).c_str())});
  }
  // Across the regimes, as declared while the fixed regime ran: scale against fixed for the two
  // rotary kinds, extrapolated at 2x, Holm over the two.
  r.primary = {"rope-axial@scale vs rope-axial@fixed @ 56 zoom extrap",
               "rope-mixed@scale vs rope-mixed@fixed @ 56 zoom extrap"};
  const std::vector<ContrastResult> across = primary_contrasts(r);
  for (const ContrastResult& c : across) {
    q.push_back({studies, format("| %s (14x14) | %s | %.3g |", c.name.c_str(),
                                 contrast_cell(c).c_str(), c.p_signed_rank)});
  }
  // The prose's ranges over the five kinds, beside the 7x7 fixed-size arm's for the same kinds.
  const CompareResults small =
      parse_results_json(slurp(kDocs + "resolution-fmnist-decisive/fixed/results.json"));
  auto over_kinds = [&](const CompareResults& from, const std::string& arm,
                        const std::string& label) {
    std::vector<std::string> names;
    for (const std::string& k : kinds) names.push_back(arm.empty() ? k : k + "@" + arm);
    return span(means_at(from, names, label)) + " %";
  };
  const std::string same = "every kind falls to " + over_kinds(r, "fixed", "56 zoom extrap") +
                           " (7x7: " + over_kinds(small, "", "56 zoom extrap") +
                           "), interpolated they keep " + over_kinds(r, "fixed", "56 zoom interp") +
                           " (7x7: " + over_kinds(small, "", "56 zoom interp") + ")";
  q.push_back({studies, same});
  q.push_back({"README.md", same});
  q.push_back({studies, "Patch resize keeps " + over_kinds(r, "fixed", "56 zoom patch") + ","});
  // The scale regime beside the fixed one, exploratory: the rotary kinds' seeds extrapolated,
  // relbias carried, and what augmentation costs at the training size on each grid.
  auto seeds = [&](const std::string& k, const std::string& label) {
    std::vector<double> a = accuracies_at(r, k, column(r, label));
    for (double& v : a) v *= 100;
    return span(a) + " %";
  };
  q.push_back({studies, "`rope-axial` stays at " + seeds("rope-axial@scale", "56 zoom extrap") +
                            format(" in every seed (%.1f %% interpolated)",
                                   mean_at(r, "rope-axial@scale", "56 zoom interp"))});
  q.push_back({"README.md", "extrapolated `rope-axial` still stays at " +
                                seeds("rope-axial@scale", "56 zoom extrap") + " in every seed"});
  q.push_back({studies, "`rope-mixed` spreads over " + seeds("rope-mixed@scale", "56 zoom extrap") +
                            format(" (%.1f %% interpolated)",
                                   mean_at(r, "rope-mixed@scale", "56 zoom interp"))});
  q.push_back({studies, format("`relbias`: %.1f %% extrapolated against %.1f %% at the fixed size",
                               mean_at(r, "relbias@scale", "56 zoom extrap"),
                               mean_at(r, "relbias@fixed", "56 zoom extrap"))});
  q.push_back({"README.md", format("`relbias` keeps most (%.1f %% extrapolated against %.1f %% "
                                   "interpolated)",
                                   mean_at(r, "relbias@scale", "56 zoom extrap"),
                                   mean_at(r, "relbias@scale", "56 zoom interp"))});
  const CompareResults small_scale =
      parse_results_json(slurp(kDocs + "resolution-fmnist-decisive/scale/results.json"));
  std::vector<double> cost14, cost7;
  int64_t levelled_fixed = 0, levelled_scale = 0;
  for (const std::string& k : kinds) {
    cost14.push_back(mean_at(r, k + "@fixed", "28") - mean_at(r, k + "@scale", "28"));
    cost7.push_back(mean_at(small, k, "28") - mean_at(small_scale, k, "28"));
    levelled_fixed += plateau(r, k + "@fixed").plateaued;
    levelled_scale += plateau(r, k + "@scale").plateaued;
  }
  q.push_back({studies, "lose " + span(cost14) +
                            " points at the training size after the same 6 "
                            "epochs (the same kinds on 7x7: " +
                            span(cost7) + "), and " +
                            format("%lld of their 15 runs had levelled off (%lld of 15 at the "
                                   "fixed size)",
                                   static_cast<long long>(levelled_scale),
                                   static_cast<long long>(levelled_fixed))});
  // "None of the six declared contrasts excludes 0 with three seeds".
  for (const std::vector<ContrastResult>& arm : own)
    for (const ContrastResult& c : arm) EXPECT_FALSE(c.significant) << c.name;
  for (const ContrastResult& c : across) EXPECT_FALSE(c.significant) << c.name;
  return q;
}

std::vector<Quote> all_quotes() {
  std::vector<Quote> q = regime_pilot();
  for (Quote& d : decisive_arm()) q.push_back(std::move(d));
  for (Quote& d : fine_tuned_arm()) q.push_back(std::move(d));
  for (Quote& d : grid14_arm()) q.push_back(std::move(d));
  return q;
}

// Runs of white space as one space: a quote may wrap across lines and list indentation.
std::string squeeze(const std::string& s) {
  std::string o;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && (o.empty() || o.back() == ' ')) continue;
    o += space ? ' ' : c;
  }
  return o;
}

TEST(Published, QuotedFiguresFollowFromTheCommittedResults) {
  for (const Quote& q : all_quotes()) {
    const std::string text = squeeze(slurp(std::string(VITPE_SOURCE_DIR) + "/" + q.doc));
    EXPECT_NE(text.find(q.text), std::string::npos)
        << q.doc << " does not say, as its results.json computes: " << q.text;
  }
}

// The signed intervals a text quotes, "[+1.7, +7.0]": how the studies print differences (not the
// "[49, 49]" shapes of code). Scanned by hand: <regex> draws a false uninitialised-use warning
// from g++ 12 in the sanitizer build.
std::vector<std::string> signed_intervals(const std::string& text) {
  auto number = [&](size_t& i) {  // [+-]digits.digits at i; advances past it
    if (i >= text.size() || (text[i] != '+' && text[i] != '-')) return false;
    size_t j = i + 1, digits = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j, ++digits;
    if (digits == 0 || j >= text.size() || text[j] != '.') return false;
    size_t k = j + 1;
    while (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) ++k;
    if (k == j + 1) return false;
    i = k;
    return true;
  };
  std::vector<std::string> out;
  for (size_t b = text.find('['); b != std::string::npos; b = text.find('[', b + 1)) {
    size_t i = b + 1;
    if (!number(i) || text.compare(i, 2, ", ") != 0) continue;
    i += 2;
    if (!number(i) || i >= text.size() || text[i] != ']') continue;
    out.push_back(text.substr(b, i + 1 - b));
  }
  return out;
}

// Every "[low, high]" interval README.md quotes is part of a checked quote above.
TEST(Published, EveryIntervalTheReadmeQuotesIsChecked) {
  const std::string readme = squeeze(slurp(std::string(VITPE_SOURCE_DIR) + "/README.md"));
  const std::vector<Quote> quotes = all_quotes();
  EXPECT_EQ(signed_intervals("a [+1.7, -7.0] b [49, 49] c [-0.1, +16.75]."),
            (std::vector<std::string>{"[+1.7, -7.0]", "[-0.1, +16.75]"}));
  const std::vector<std::string> found = signed_intervals(readme);
  for (const std::string& interval : found) {
    const bool checked = std::any_of(quotes.begin(), quotes.end(), [&](const Quote& q) {
      return q.doc == "README.md" && q.text.find(interval) != std::string::npos;
    });
    EXPECT_TRUE(checked) << "README.md quotes the interval " << interval
                         << " that no check in this file recomputes";
  }
  EXPECT_GT(found.size(), 0u);
}

}  // namespace
}  // namespace vitpe
