// Tests of vit/compare/report.cpp: statistics of the summary, JSON round trip, CSV, base64, and the
// HTML report rendered by headless Chromium (screenshot not blank, no console messages, table
// and charts in the DOM). Chromium tests skip with a message when it is not installed.
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
#include "vit/compare/report.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

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
  r.pictures.push_back({"sincos2d", {Picture{"channels 0-3", png}}});
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
  EXPECT_NE(t.find("71.50 +- 0.71"), std::string::npos) << t;  // rope-mixed at 28
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
  run_capture(common + " --screenshot=" + shot.string() + " --window-size=1200,2400 file://" +
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
