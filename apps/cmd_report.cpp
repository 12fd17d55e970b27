// `vitpe report RESULTS_JSON...`: report.html (and results.csv) rendered again from one or more
// comparisons' results.json, e.g. for results kept without their run folders, written by an
// earlier version (drawn with the current charts and statistics), or split into several
// resumable invocations (by kind or by regime) that one report should compare. Several files
// must have the same evaluation columns; their runs are merged, each file's encodings renamed
// "KIND@TAG" with --tag so that the same kind under two regimes stays two rows. The encoding
// pictures a results.json lists are linked where their files still lie beside it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/command.h"
#include "ops/files.h"
#include "ops/util.h"
#include "vit/compare/merge.h"
#include "vit/compare/report.h"

namespace vitpe::app {
namespace {

namespace fs = std::filesystem;

struct ReportOptions {
  std::vector<std::string> results;
  std::vector<std::string> tags;
  std::vector<std::string> primary;
  double success_percent = -1;
  std::string out, csv, json, title;
  bool force = false;
};

std::string read_all(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw ExitError{1, "report: " + path + ": expected a comparison's results.json, found " +
                           (fs::exists(path, ec) ? "something that is not a file" : "no file")};
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (!f && !f.eof()) throw ExitError{1, "report: cannot read " + path};
  return ss.str();
}

// Refuses to replace a file unless --force: a report is a result, and results are not silently
// overwritten.
void check_free(const std::string& path, bool force) {
  std::error_code ec;
  if (!force && fs::exists(path, ec))
    throw ExitError{1, "report: " + path + " exists; --force replaces it, or choose another --out"};
}

CompareResults read_results(const std::string& path) {
  const std::string text = read_all(path);
  CompareResults r;
  try {
    r = parse_results_json(text);
  } catch (const std::exception& e) {
    throw ExitError{1, "report: " + path +
                           ": expected the results.json `vitpe compare` writes (title, encodings, "
                           "seeds, sizes, runs, ...), found: " +
                           e.what()};
  }
  if (r.runs.empty()) throw ExitError{1, "report: " + path + " holds no runs"};
  for (const RunResult& run : r.runs) {
    if (run.accuracy.size() != r.sizes.size())
      throw ExitError{1, "report: " + path + ": run " + run.encoding + " seed " +
                             std::to_string(run.seed) + " has " +
                             std::to_string(run.accuracy.size()) +
                             " accuracies, expected one per column (" +
                             std::to_string(r.sizes.size()) + ")"};
  }
  return r;
}

// The pictures `r` lists that still lie beside its results.json (`from`), linked from the
// report at `out`; returns how many were missing.
size_t relink_pictures(CompareResults& r, const fs::path& from, const fs::path& out) {
  size_t missing = 0;
  const fs::path base = fs::absolute(from).parent_path();
  const fs::path page_dir = fs::absolute(out).parent_path();
  for (auto& [enc, pics] : r.pictures) {
    std::vector<Picture> kept;
    for (Picture& p : pics) {
      std::error_code ec;
      const fs::path file = (base / p.file).lexically_normal();
      if (!fs::is_regular_file(file, ec)) {
        ++missing;
        continue;
      }
      p.file = file.lexically_relative(page_dir.lexically_normal()).generic_string();
      kept.push_back(std::move(p));
    }
    pics = std::move(kept);
  }
  std::erase_if(r.pictures, [](const auto& e) { return e.second.empty(); });
  return missing;
}

void run_report(const ReportOptions& o) {
  if (!o.tags.empty() && o.tags.size() != o.results.size())
    throw ExitError{2, "--tag: give one tag per results.json (" + std::to_string(o.results.size()) +
                           "), found " + std::to_string(o.tags.size())};
  for (size_t i = 0; i < o.tags.size(); ++i) {
    const std::string& t = o.tags[i];
    if (t.empty() || t.find_first_of("@,/ ") != std::string::npos)
      throw ExitError{2, "--tag: '" + printable(t) +
                             "': expected a short word (no '@', ',', '/' or spaces)"};
    for (size_t k = 0; k < i; ++k)
      if (o.tags[k] == t) throw ExitError{2, "--tag: '" + printable(t) + "' is given twice"};
  }
  if (o.results.size() > 1 && o.out.empty())
    throw ExitError{2, "report: several results.json merge into one report: give --out FILE"};
  const std::string out =
      o.out.empty() ? (fs::path(o.results[0]).parent_path() / "report.html").string() : o.out;
  check_free(out, o.force);
  if (!o.csv.empty()) check_free(o.csv, o.force);
  if (!o.json.empty()) {
    for (const std::string& in : o.results) {
      std::error_code ec;
      if (fs::equivalent(in, o.json, ec))
        throw ExitError{2, "--json: " + o.json + " is one of the results.json read; choose "
                           "another file"};
    }
    check_free(o.json, o.force);
  }

  CompareResults r;
  size_t missing = 0, linked = 0;
  auto label = [&](size_t i) { return o.tags.empty() ? o.results[i] : o.tags[i]; };
  for (size_t i = 0; i < o.results.size(); ++i) {
    CompareResults one = read_results(o.results[i]);
    missing += relink_pictures(one, o.results[i], out);
    for (const auto& p : one.pictures) linked += p.second.size();
    if (!o.tags.empty()) tag_encodings(one, o.tags[i]);
    if (i == 0) {
      r = std::move(one);
    } else {
      try {
        merge_results(r, one, label(0), label(i), o.results[i]);
      } catch (const std::runtime_error& e) {
        throw ExitError{1, std::string("report: ") + e.what()};
      }
    }
  }
  if (!o.title.empty()) r.title = o.title;
  // Contrasts declared here (a study split into several invocations is only whole now); the
  // settings say they were declared with the report, not before the runs.
  if (!o.primary.empty()) {
    for (const std::string& c : o.primary) {
      try {
        parse_primary(r, c);
      } catch (const std::invalid_argument& e) {
        throw ExitError{2, std::string("--primary: ") + e.what()};
      }
    }
    r.primary = o.primary;
    r.settings.emplace_back("primary contrasts", "declared with the report: " +
                                                     join(o.primary, "; "));
  }
  if (o.success_percent >= 0) {
    if (o.success_percent > 100)
      throw ExitError{2, "--success-threshold: expected an accuracy in 0..100 %, found " +
                             std::to_string(o.success_percent)};
    r.success_threshold = o.success_percent / 100;
  }
  if (o.results.size() > 1) {
    std::string from;
    for (size_t i = 0; i < o.results.size(); ++i)
      from += (i ? "; " : "") + (o.tags.empty() ? "" : o.tags[i] + " = ") + o.results[i];
    r.settings.emplace_back("merged from", from);
  }
  std::string note = "rendered again by `" + utf8_safe(invocation()) + "` from results.json";
  if (linked > 0) note += "; " + std::to_string(linked) + " encoding pictures linked";
  if (missing > 0)
    note += "; " + std::to_string(missing) + " encoding pictures left out (their files are gone)";
  if (linked == 0 && missing == 0)
    note += "; no encoding pictures (the results list none: they need the trained models)";
  r.settings.emplace_back("report", note);
  if (missing > 0)
    std::fprintf(stderr, "report: %zu encoding pictures listed in the results are missing\n",
                 missing);
  write_file_atomic(out, report_html(r));
  if (!o.csv.empty()) write_file_atomic(o.csv, results_csv(r));
  if (!o.json.empty()) {
    // The pictures' paths relative to the results file, as compare writes them (the report's
    // are relative to the report).
    CompareResults j = r;
    const fs::path page_dir = fs::absolute(out).parent_path(),
                   json_dir = fs::absolute(o.json).parent_path();
    for (auto& [enc, pics] : j.pictures)
      for (Picture& p : pics)
        p.file = (page_dir / p.file).lexically_normal().lexically_relative(json_dir).generic_string();
    write_file_atomic(o.json, results_json(j));
  }
  std::printf("%s: %zu runs (%zu encodings x %zu seeds), %zu columns\n", out.c_str(), r.runs.size(),
              r.encodings.size(), r.seeds.size(), r.sizes.size());
  if (!o.csv.empty()) std::printf("%s\n", o.csv.c_str());
  if (!o.json.empty()) std::printf("%s\n", o.json.c_str());
}

void add_report(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "report",
      "Render a comparison's report.html again from its results.json, or one report from "
      "several (the same columns: e.g. a study split by kind or by regime)");
  auto o = std::make_shared<ReportOptions>();
  cmd->add_option("results", o->results,
                  "results.json written by `vitpe compare` (several: their runs merged)")
      ->required();
  cmd->add_option("--tag", o->tags,
                  "One word per results.json, comma separated: each file's encodings become "
                  "KIND@TAG (the same kind from two regimes stays two rows)")
      ->delimiter(',');
  cmd->add_option("--out", o->out,
                  "HTML file to write (default with one results.json: report.html beside it)");
  cmd->add_option("--csv", o->csv, "Also write the per-run table as CSV to this file");
  cmd->add_option("--json", o->json,
                  "Also write the merged results (tagged runs, declared primary contrasts and "
                  "their Holm intervals) as one results.json to this file");
  cmd->add_option("--title", o->title, "The report's title (default: the first file's)");
  cmd->add_option("--primary", o->primary,
                  "Primary contrasts 'A vs B @ COLUMN' (as compare's --primary; they replace the "
                  "results' own), tested with Holm's adjustment over their list")
      ->delimiter(';');
  cmd->add_option("--success-threshold", o->success_percent,
                  "Accuracy in % at or above which a run counts as a success (success rates)");
  cmd->add_flag("--force", o->force, "Replace --out (and --csv, --json) when they exist");
  cmd->callback([o] { run_report(*o); });
}

}  // namespace

VITPE_COMMAND(43, "report", light, add_report);

}  // namespace vitpe::app
