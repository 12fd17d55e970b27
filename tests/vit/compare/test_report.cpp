// Tests of vit/compare/report.cpp: the statistics of vit/compare/stats.h as the tables show them,
// JSON round trip, CSV, base64, and the HTML report rendered by headless Chromium (screenshot not
// blank, no console messages, table and charts in the DOM). Chromium tests skip with a message
// when it is not installed. The statistics themselves are tested in test_stats.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "ops/files.h"
#include "tests/testing.h"
#include "vit/compare/report.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

// Where synthetic_results' linked picture lies, relative to the report.
const char* const kLinkedPicture = "pictures/rope-mixed:theta=10+x/attention #1.png";

CompareResults synthetic_results() {
  CompareResults r;
  r.title = "Test <comparison> & co";
  r.encodings = {"none", "sincos2d", "rope-mixed"};
  r.seeds = {1, 2};
  r.sizes = {28, 36, 44};
  r.train_size = 28;
  r.wall_seconds = 125;
  r.settings = {{"model", "vit-fmnist"}, {"epochs", "3"}, {"dataset", "procedural"}};
  r.versions = {{"vitpe", "0.1.0"}, {"oneDNN", "3.0"}};
  for (size_t e = 0; e < r.encodings.size(); ++e) {
    for (uint64_t seed : r.seeds) {
      RunResult run;
      run.encoding = r.encodings[e];
      run.seed = seed;
      run.params = 1000 + static_cast<int64_t>(e) * 100;
      run.params_added = static_cast<int64_t>(e) * 100;
      run.train_seconds = 10.0 * (e + 1) + static_cast<double>(seed);
      for (size_t s = 0; s < r.sizes.size(); ++s) {
        run.accuracy.push_back(0.3 + 0.2 * e - 0.05 * s + 0.01 * static_cast<double>(seed));
        run.loss.push_back(1.0 - 0.1 * e);
      }
      for (int ep = 1; ep <= 3; ++ep) {
        EpochRecord h;
        h.epoch = ep;
        h.step = ep * 10;
        h.train_loss = 1.5 / ep + 0.1 * e;
        h.test_acc = 0.25 + 0.1 * ep + 0.05 * e;
        run.history.push_back(h);
      }
      r.runs.push_back(run);
    }
  }
  // A 2x2 PNG made with OpenCV.
  cv::Mat img(2, 2, CV_8UC3, cv::Scalar(10, 200, 30));
  std::vector<uint8_t> png;
  cv::imencode(".png", img, png);
  r.pictures.push_back({"sincos2d", {Picture{"channels 0-3", png, ""}}});
  // A picture the report links instead (a file beside it, its folder named after a spec).
  r.pictures.push_back({"rope-mixed", {Picture{"attention", {}, kLinkedPicture}}});
  return r;
}

TEST(Report, SummaryIsMeanAndSampleStdOverSeeds) {
  CompareResults r = synthetic_results();
  auto rows = summarize(r);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].encoding, "sincos2d");
  EXPECT_EQ(rows[1].runs, 2);
  EXPECT_EQ(rows[1].params_added, 100);
  // Seeds 1 and 2: accuracies 0.5 - 0.05 s + {0.01, 0.02}: mean +0.015, std 0.01 / sqrt(2).
  EXPECT_NEAR(rows[1].mean[1], 0.5 - 0.05 + 0.015, 1e-12);
  EXPECT_NEAR(rows[1].stddev[1], 0.01 / std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(rows[2].train_seconds, 31.5, 1e-12);
  std::string t = terminal_table(r);
  EXPECT_NE(t.find("acc@28*"), std::string::npos) << t;
  EXPECT_NE(t.find("rope-mixed"), std::string::npos) << t;
  // The +- is the half-width of the t-based 95 % interval: 2 seeds, t(0.975, 1) = 12.706,
  // s = 0.01 / sqrt(2): 12.706 * s / sqrt(2) = 0.0635 (6.35 points).
  EXPECT_NEAR(rows[2].ci95[0], 12.706 * 0.005, 1e-9);
  EXPECT_NE(t.find("71.50 +- 6.35"), std::string::npos) << t;  // rope-mixed at 28
  EXPECT_NE(t.find("t-based 95 % interval over 2 seeds"), std::string::npos) << t;
}

// Paired by seed: the differences of runs trained with the same seed, against the reference.
TEST(Statistics, PairedDifferencesAgainstTheReference) {
  CompareResults r = synthetic_results();
  r.seeds = {1, 2, 3};
  // A third seed for none and sincos2d only, with a seed effect both share (+0.1) and noise.
  for (size_t e = 0; e < 2; ++e) {
    RunResult run = r.runs[2 * e];
    run.seed = 3;
    for (double& a : run.accuracy) a += 0.1 + (e == 1 ? 0.004 : 0.0);
    r.runs.push_back(run);
  }
  const std::vector<PairedRow> rows = paired_differences(r);  // against none (the first)
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].encoding, "sincos2d");
  // Seeds 1, 2: sincos2d - none = 0.2 exactly; seed 3: 0.204.
  const Interval& d = rows[0].diff[1];
  EXPECT_EQ(d.n, 3);
  EXPECT_NEAR(d.mean, (0.2 + 0.2 + 0.204) / 3, 1e-12);
  const double s = std::sqrt((2 * std::pow(0.2 - d.mean, 2) + std::pow(0.204 - d.mean, 2)) / 2);
  EXPECT_NEAR(d.half, 4.303 * s / std::sqrt(3.0), 1e-12);
  EXPECT_TRUE(d.excludes_zero());
  // rope-mixed has no seed 3: two pairs.
  EXPECT_EQ(rows[1].encoding, "rope-mixed");
  EXPECT_EQ(rows[1].diff[0].n, 2);
  EXPECT_NEAR(rows[1].diff[0].mean, 0.4, 1e-12);

  r.reference = "sincos2d";
  const std::vector<PairedRow> against = paired_differences(r);
  ASSERT_EQ(against.size(), 2u);
  EXPECT_EQ(against[0].encoding, "none");
  EXPECT_LT(against[0].diff[0].mean, 0);

  const std::string t = terminal_table(r);
  EXPECT_NE(t.find("paired differences against sincos2d"), std::string::npos) << t;
  EXPECT_NE(t.find("-20.13 [-20.71, -19.56]*"), std::string::npos) << t;

  // results.json carries the intervals and the paired differences, and reads the reference back.
  const std::string j = results_json(r);
  EXPECT_NE(j.find("\"accuracy_ci95\""), std::string::npos);
  EXPECT_NE(j.find("\"paired_differences\""), std::string::npos);
  EXPECT_NE(j.find("\"excludes_zero\": true"), std::string::npos);
  EXPECT_EQ(parse_results_json(j).reference, "sincos2d");

  // The report: the paired table, and every seed's point in the accuracy chart (3 encodings,
  // seeds 1-3 where run, 3 sizes: 8 runs x 3 sizes).
  const std::string html = report_html(r);
  EXPECT_NE(html.find("<table id=\"paired\">"), std::string::npos);
  size_t seeds_drawn = 0;
  for (size_t at = html.find("class=\"seed\""); at != std::string::npos;
       at = html.find("class=\"seed\"", at + 1)) {
    ++seeds_drawn;
  }
  EXPECT_EQ(seeds_drawn, 8u * 3u);
}

// Cost per encoding: GFLOPs and ms per image kept in results.json, tabled in the report with the
// time relative to the reference; absent (results from before) means no table.
TEST(Report, CostPerEncodingTable) {
  CompareResults r = synthetic_results();
  EXPECT_EQ(report_html(r).find("id=\"cost\""), std::string::npos) << "no costs, no table";
  for (RunResult& run : r.runs) {
    const double scale = run.encoding == "rope-mixed" ? 2.0 : 1.0;
    for (size_t k = 0; k < r.sizes.size(); ++k) {
      run.gflops.push_back(0.1 * static_cast<double>(k + 1));
      run.ms_per_image.push_back(0.5 * scale * static_cast<double>(k + 1));
    }
  }
  const CompareResults back = parse_results_json(results_json(r));
  EXPECT_EQ(back.runs[5].ms_per_image, r.runs[5].ms_per_image);
  EXPECT_EQ(back.runs[0].gflops, r.runs[0].gflops);
  const std::string html = report_html(r);
  const size_t at = html.find("<table id=\"cost\">");
  ASSERT_NE(at, std::string::npos);
  const std::string table = html.substr(at, html.find("</table>", at) - at);
  EXPECT_NE(table.find("<td>1.000 (2.00x)</td>"), std::string::npos) << table;  // rope-mixed @28
  EXPECT_NE(table.find("<td>0.3000</td>"), std::string::npos) << table;         // GFLOPs @44
}

TEST(Statistics, OneSeedHasNoIntervalNorPairedTable) {
  CompareResults r = synthetic_results();
  r.seeds = {1};
  std::vector<RunResult> first;
  for (const RunResult& run : r.runs) {
    if (run.seed == 1) first.push_back(run);
  }
  r.runs = first;
  const std::string t = terminal_table(r);
  EXPECT_EQ(t.find("+-"), std::string::npos) << t;
  EXPECT_NE(t.find("one seed: no interval"), std::string::npos) << t;
  EXPECT_EQ(t.find("paired differences"), std::string::npos) << t;
  const std::string html = report_html(r);
  EXPECT_EQ(html.find("id=\"paired\""), std::string::npos);
  EXPECT_EQ(html.find("class=\"seed\""), std::string::npos);
}

TEST(Report, JsonRoundTripAndCsv) {
  CompareResults r = synthetic_results();
  CompareResults back = parse_results_json(results_json(r));
  EXPECT_EQ(back.encodings, r.encodings);
  EXPECT_EQ(back.sizes, r.sizes);
  ASSERT_EQ(back.runs.size(), r.runs.size());
  EXPECT_EQ(back.runs[3].accuracy, r.runs[3].accuracy);
  EXPECT_EQ(back.runs[3].history[2].test_acc, r.runs[3].history[2].test_acc);
  EXPECT_EQ(back.settings, r.settings);
  // The linked pictures are recorded (caption and file), the inlined ones are not.
  ASSERT_EQ(back.pictures.size(), 1u);
  EXPECT_EQ(back.pictures[0].first, "rope-mixed");
  ASSERT_EQ(back.pictures[0].second.size(), 1u);
  EXPECT_EQ(back.pictures[0].second[0].caption, "attention");
  EXPECT_EQ(back.pictures[0].second[0].file, kLinkedPicture);
  std::string csv = results_csv(r);
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line,
            "encoding,seed,params,params_added,train_seconds,acc_28,loss_28,acc_36,"
            "loss_36,acc_44,loss_44");
  int n = 0;
  while (std::getline(in, line)) ++n;
  EXPECT_EQ(n, 6);
}

// Pre-declared primary contrasts: read against the study's encodings and column labels (errors
// say what was expected and found), tested as Holm's contrasts of the paired differences in
// points; plateau counts the runs whose last epoch moved at most 0.5 points; the report shows
// both, success rates under a threshold, and calls the other differences exploratory.
TEST(Report, PrimaryContrastsSuccessRatesAndPlateau) {
  CompareResults r = synthetic_results();
  const PrimarySpec p = parse_primary(r, "rope-mixed vs none @ 36");
  EXPECT_EQ(p.a, "rope-mixed");
  EXPECT_EQ(p.b, "none");
  EXPECT_EQ(p.column, 1u);
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {"rope-mixed - none @ 36", "expected 'A vs B @ COLUMN'"},
           {"rope vs none @ 36", "'rope' is not an encoding of the study (none, sincos2d"},
           {"rope-mixed vs none @ 99", "no column '99' (the columns: '28', '36', '44')"}}) {
    const std::string m = testing::message_of([&] { parse_primary(r, bad); });
    EXPECT_NE(m.find(says), std::string::npos) << m;
  }
  r.primary = {"rope-mixed vs none @ 36", "sincos2d vs none @ 44"};
  const std::vector<ContrastResult> got = primary_contrasts(r);
  std::vector<Contrast> by_hand = {
      {"rope-mixed vs none @ 36", paired_accuracy_differences(r, "rope-mixed", "none", 1)},
      {"sincos2d vs none @ 44", paired_accuracy_differences(r, "sincos2d", "none", 2)}};
  for (Contrast& c : by_hand)
    for (double& d : c.differences) d *= 100;
  const std::vector<ContrastResult> want = holm_contrasts(by_hand);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_DOUBLE_EQ(got[i].mean, want[i].mean);
    EXPECT_DOUBLE_EQ(got[i].p_holm, want[i].p_holm);
  }
  EXPECT_NEAR(got[0].mean, 40.0, 1e-9);  // 0.2 per encoding step, twice
  // The synthetic runs gain 10 points every epoch: none has levelled off.
  PlateauSummary pl = plateau(r, "none");
  EXPECT_EQ(pl.runs, 2);
  EXPECT_EQ(pl.plateaued, 0);
  EXPECT_NEAR(pl.largest_change, 10.0, 1e-9);
  r.runs[0].history.back().test_acc = r.runs[0].history[1].test_acc + 0.004;
  pl = plateau(r, "none");
  EXPECT_EQ(pl.plateaued, 1);
  r.success_threshold = 0.5;
  const CompareResults back = parse_results_json(results_json(r));
  EXPECT_EQ(back.primary, r.primary);
  EXPECT_EQ(back.success_threshold, 0.5);
  const std::string html = report_html(r);
  EXPECT_NE(html.find("Primary contrasts (declared before the runs, Holm over 2)"),
            std::string::npos);
  EXPECT_NE(html.find("<td>rope-mixed vs none @ 36</td><td>2</td>"), std::string::npos);
  // The rank test's floor for the pairs at hand (2 seeds: 2 / 2^2), not a fixed seed count.
  EXPECT_NE(html.find("with 2 pairs its smallest p is 0.5)"), std::string::npos);
  EXPECT_NE(html.find("Success rates (accuracy &ge; 50.0 %)"), std::string::npos);
  EXPECT_NE(html.find("(exploratory, unadjusted)"), std::string::npos);
  EXPECT_NE(html.find("<td>1/2 (max 10.00)</td>"), std::string::npos);
  // none at 28 px: 0.31 and 0.32, sincos2d 0.51 and 0.52 against a 50 % threshold.
  EXPECT_NE(html.find("<tr><td>sincos2d</td><td>2/2"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>none</td><td>0/2"), std::string::npos);
}

TEST(Report, Base64KnownVectors) {
  auto b = [](const std::string& s) { return base64_encode({s.begin(), s.end()}); };
  EXPECT_EQ(b(""), "");
  EXPECT_EQ(b("M"), "TQ==");
  EXPECT_EQ(b("Ma"), "TWE=");
  EXPECT_EQ(b("Man"), "TWFu");
  EXPECT_EQ(b("foobar"), "Zm9vYmFy");
}

TEST(Report, HtmlIsSelfContainedAndEscaped) {
  std::string html = report_html(synthetic_results());
  EXPECT_NE(html.find("<table id=\"summary\">"), std::string::npos);
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 3u) << "accuracy vs resolution, test accuracy and loss curves";
  EXPECT_NE(html.find("data:image/png;base64,iVBORw0KGgo"), std::string::npos);
  // A linked picture: its path as a URL, the spec's characters percent-encoded.
  const std::string url = "pictures/rope-mixed%3Atheta%3D10%2Bx/attention%20%231.png";
  EXPECT_NE(html.find("<a href=\"" + url + "\"><img alt=\"rope-mixed: attention\" src=\"" + url),
            std::string::npos)
      << html.substr(html.find("The encodings"));
  EXPECT_NE(html.find("Test &lt;comparison&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"))
      << "no external resources";
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(c)) return c;
  return "";
}

TEST(Report, RendersInHeadlessChromium) {
  const std::string chrome = chromium();
  if (chrome.empty()) GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  fs::path dir = fs::temp_directory_path() / ("vitpe_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path page = dir / "report.html", shot = dir / "shot.png";
  write_file_atomic(page.string(), report_html(synthetic_results()));
  // The linked picture: a magenta square in its file beside the report.
  fs::create_directories((dir / kLinkedPicture).parent_path());
  std::vector<uint8_t> square;
  cv::imencode(".png", cv::Mat(64, 64, CV_8UC3, cv::Scalar(255, 0, 255)), square);
  write_file_atomic((dir / kLinkedPicture).string(), std::string(square.begin(), square.end()));
  const std::string common = "timeout 120 " + chrome +
                             " --headless --disable-gpu --no-sandbox --no-first-run"
                             " --user-data-dir=" +
                             (dir / "profile").string() + " --enable-logging=stderr --v=0";
  // DOM after rendering, with the console log on stderr.
  std::string dom = run_capture(common + " --dump-dom file://" + page.string() + " 2>" +
                                (dir / "log1.txt").string());
  EXPECT_NE(dom.find("id=\"summary\""), std::string::npos) << dom.substr(0, 500);
  EXPECT_NE(dom.find("<svg"), std::string::npos);
  EXPECT_NE(dom.find("<polyline"), std::string::npos);
  run_capture(common + " --screenshot=" + shot.string() + " --window-size=1200,6000 file://" +
              page.string() + " 2>" + (dir / "log2.txt").string());
  for (const char* log : {"log1.txt", "log2.txt"}) {
    std::ifstream f(dir / log);
    std::string line;
    while (std::getline(f, line)) {
      EXPECT_EQ(line.find("CONSOLE"), std::string::npos) << "console message: " << line;
    }
  }
  ASSERT_TRUE(fs::exists(shot)) << "no screenshot written";
  cv::Mat img = cv::imread(shot.string(), cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty());
  EXPECT_EQ(img.cols, 1200);
  // Not blank: a good share of pixels differs from the white background, in several colours.
  cv::Mat gray;
  cv::cvtColor(img, gray, cv::COLOR_BGR2GRAY);
  const double non_white = cv::countNonZero(gray < 240) / static_cast<double>(gray.total());
  EXPECT_GT(non_white, 0.01);
  cv::Scalar mean, stddev;
  cv::meanStdDev(img, mean, stddev);
  EXPECT_GT(stddev[0] + stddev[1] + stddev[2], 10.0);
  // The linked picture is drawn: its 64x64 magenta square is on the page (nothing else is that
  // colour), and without its file it is not.
  auto magenta = [](const cv::Mat& m) {
    cv::Mat mask;
    cv::inRange(m, cv::Scalar(245, 0, 245), cv::Scalar(255, 10, 255), mask);
    return cv::countNonZero(mask);
  };
  EXPECT_GE(magenta(img), 64 * 64 * 9 / 10) << "the linked picture is not drawn";
  fs::remove(dir / kLinkedPicture);
  const fs::path shot2 = dir / "shot2.png";
  run_capture(common + " --screenshot=" + shot2.string() + " --window-size=1200,6000 file://" +
              page.string() + " 2>/dev/null");
  cv::Mat without = cv::imread(shot2.string(), cv::IMREAD_COLOR);
  ASSERT_FALSE(without.empty());
  EXPECT_EQ(magenta(without), 0);
  fs::remove_all(dir);
}

// A report written while a study runs shows finished encodings only, not zeros for the others.
TEST(Compare, PartialResultsLeaveOutUnfinishedEncodings) {
  CompareResults r;
  r.encodings = {"none", "sincos2d"};
  r.seeds = {1};
  r.sizes = {16};
  r.train_size = 16;
  RunResult run;
  run.encoding = "none";
  run.seed = 1;
  run.accuracy = {0.5};
  run.loss = {1.0};
  r.runs = {run};
  const std::vector<SummaryRow> rows = summarize(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].encoding, "none");
}

}  // namespace
}  // namespace vitpe
