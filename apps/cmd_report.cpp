// `vitpe report RESULTS_JSON`: report.html (and results.csv) rendered again from a comparison's
// results.json, e.g. for results kept without their run folders or written by an earlier
// version, whose report this version draws with its current charts and statistics. The encoding
// pictures need the trained models and are left out (the report says the comparison's own
// report.html has them).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/command.h"
#include "ops/files.h"
#include "ops/util.h"
#include "vit/compare/report.h"

namespace vitpe::app {
namespace {

namespace fs = std::filesystem;

struct ReportOptions {
  std::string results, out, csv;
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

void run_report(const ReportOptions& o) {
  const std::string text = read_all(o.results);
  CompareResults r;
  try {
    r = parse_results_json(text);
  } catch (const std::exception& e) {
    throw ExitError{1, "report: " + o.results +
                           ": expected the results.json `vitpe compare` writes (title, encodings, "
                           "seeds, sizes, runs, ...), found: " +
                           e.what()};
  }
  if (r.runs.empty()) throw ExitError{1, "report: " + o.results + " holds no runs"};
  for (const RunResult& run : r.runs) {
    if (run.accuracy.size() != r.sizes.size())
      throw ExitError{1, "report: " + o.results + ": run " + run.encoding + " seed " +
                             std::to_string(run.seed) + " has " +
                             std::to_string(run.accuracy.size()) +
                             " accuracies, expected one per "
                             "column (" +
                             std::to_string(r.sizes.size()) + ")"};
  }
  const std::string out =
      o.out.empty() ? (fs::path(o.results).parent_path() / "report.html").string() : o.out;
  check_free(out, o.force);
  if (!o.csv.empty()) check_free(o.csv, o.force);
  r.settings.emplace_back("report", "rendered again by `" + utf8_safe(invocation()) +
                                        "` from results.json; encoding pictures left out (they "
                                        "need the trained models)");
  write_file_atomic(out, report_html(r));
  if (!o.csv.empty()) write_file_atomic(o.csv, results_csv(r));
  std::printf("%s: %zu runs (%zu encodings x %zu seeds), %zu columns\n", out.c_str(), r.runs.size(),
              r.encodings.size(), r.seeds.size(), r.sizes.size());
  if (!o.csv.empty()) std::printf("%s\n", o.csv.c_str());
}

void add_report(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "report",
      "Render a comparison's report.html again from its results.json (no encoding pictures: "
      "they need the trained models)");
  auto o = std::make_shared<ReportOptions>();
  cmd->add_option("results", o->results, "results.json written by `vitpe compare`")->required();
  cmd->add_option("--out", o->out, "HTML file to write (default: report.html beside the results)");
  cmd->add_option("--csv", o->csv, "Also write the per-run table as CSV to this file");
  cmd->add_flag("--force", o->force, "Replace --out (and --csv) when they exist");
  cmd->callback([o] { run_report(*o); });
}

}  // namespace

VITPE_COMMAND(43, "report", light, add_report);

}  // namespace vitpe::app
