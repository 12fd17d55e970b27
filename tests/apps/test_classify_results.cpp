// `vitpe classify` on folders with a results file (timm's inference.py table): every image a row,
// a corrupt one a row naming its error, the same predictions as the printed ones, CSV and JSON;
// an existing results file is kept without --overwrite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/apps/run_vitpe.h"
#include "vit/io/classifier.h"
#include "vit/io/preprocess.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;
using testing::CmdResult;
using testing::vitpe;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Gallery {
  fs::path dir = fs::temp_directory_path() / ("vitpe_classify_dir_" + std::to_string(::getpid()));
  Gallery() {
    const std::string images = std::string(VITPE_TEST_DATA) + "/images/";
    fs::create_directories(dir / "imgs" / "sub");
    fs::copy_file(images + "rgb_20x14.png", dir / "imgs" / "rgb_20x14.png");
    fs::copy_file(images + "gray_40x52.png", dir / "imgs" / "sub" / "gray_40x52.png");
    const std::string jpeg = read_text(images + "photo_61x47.jpg");
    std::ofstream(dir / "imgs" / "cut.jpg", std::ios::binary) << jpeg.substr(0, 300);
    std::ofstream(dir / "imgs" / "notes.txt") << "not an image";
  }
  ~Gallery() { fs::remove_all(dir); }
};

TEST(ClassifyResults, AFolderGivesARowPerImageAndOneNamingTheCorruptImage) {
  Gallery g;
  const fs::path csv = g.dir / "out.csv";
  CmdResult r = vitpe("classify --model vit-fmnist --topk 2 --no-progress " +
                      (g.dir / "imgs").string() + " --results-file " + csv.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("1 of 3 images could not be classified"), std::string::npos) << r.out;
  const std::string text = read_text(csv);
  std::istringstream lines(text);
  std::string header, cut, rgb, gray;
  std::getline(lines, header);
  std::getline(lines, cut);
  std::getline(lines, rgb);
  std::getline(lines, gray);
  EXPECT_EQ(header, "image,index_1,label_1,prob_1,index_2,label_2,prob_2,error");
  EXPECT_NE(cut.find("cut.jpg,,,,,,,"), std::string::npos) << cut;
  EXPECT_NE(cut.find("invalid JPEG header"), std::string::npos) << cut;
  EXPECT_NE(rgb.find("rgb_20x14.png,"), std::string::npos) << rgb;
  EXPECT_NE(gray.find("sub/gray_40x52.png,"), std::string::npos) << gray;  // recursive, sorted
  // The printed prediction of the first good image is the row's.
  const size_t at = r.out.find("rgb_20x14.png\n  1. ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string first_label = r.out.substr(at + 19, r.out.find(' ', at + 19) - at - 19);
  EXPECT_NE(rgb.find("," + first_label + ","), std::string::npos) << rgb << " vs " << first_label;

  // JSON: the same rows; the existing CSV is kept without --overwrite.
  const fs::path json = g.dir / "out.json";
  r = vitpe("classify --model vit-fmnist --topk 2 --no-progress " + (g.dir / "imgs").string() +
            " --results-file " + json.string());
  EXPECT_EQ(r.code, 1) << r.out;
  const auto rows = nlohmann::json::parse(read_text(json));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].contains("error"));
  EXPECT_EQ(rows[1]["top"].size(), 2u);
  r = vitpe("classify --model vit-fmnist " + (g.dir / "imgs" / "rgb_20x14.png").string() +
            " --results-file " + csv.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("exists already (kept; pass --overwrite"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(csv), text);
  r = vitpe("classify --model vit-fmnist " + (g.dir / "imgs").string() + " --results-file " +
            (g.dir / "out.txt").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("expected a .csv or .json file"), std::string::npos) << r.out;
}

TEST(ClassifyResults, AnEmptyFolderIsAnError) {
  Gallery g;
  fs::create_directories(g.dir / "empty");
  CmdResult r = vitpe("classify --model vit-fmnist " + (g.dir / "empty").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the folder holds no image files"), std::string::npos) << r.out;
}

// eval --class-map / --valid-labels: a 3-class folder scored by a 10-class model over those 3
// outputs equals the accuracy computed by hand from the classifier's probabilities; the record
// has timm's validate fields.
TEST(EvalLabels, ValidLabelsOnAFolderEqualTheHandComputedAccuracy) {
  const fs::path dir =
      fs::temp_directory_path() / ("vitpe_eval_valid_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string images = std::string(VITPE_TEST_DATA) + "/images/";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"c2", "rgb_67x45.png"}, {"c2", "rgba_50x50.png"},  {"c5", "gray_40x52.png"},
      {"c5", "rgb_20x14.png"}, {"c7", "photo_61x47.jpg"}, {"c7", "rgb16_36x30.png"}};
  for (const auto& [cls, f] : files) {
    fs::create_directories(dir / "test" / cls);
    fs::copy_file(images + f, dir / "test" / cls / f);
  }
  {
    std::ofstream map(dir / "classes.txt");
    for (int i = 0; i < 10; ++i) map << "c" << i << "\n";
    std::ofstream(dir / "valid.txt") << "2\n5\n7\n";
  }
  const std::string model = std::string(VITPE_TEST_DATA) + "/vit_timm.safetensors";
  CmdResult r =
      vitpe("eval --json --no-progress --heads 4 --model " + model +
                " --dataset folder:" + dir.string() + " --class-map " +
                (dir / "classes.txt").string() + " --valid-labels " + (dir / "valid.txt").string(),
            "2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& row = j["results"][0];
  for (const char* k : {"top1", "top1_err", "top5", "top5_err", "loss", "param_count", "img_size",
                        "crop_pct", "interpolation"}) {
    EXPECT_TRUE(row.contains(k)) << k;
  }
  // By hand: the classifier's probabilities over all 10 classes, the best of 2, 5, 7.
  LoadOptions lo;
  lo.heads = 4;
  ClassifierOptions co;
  co.load = lo;
  Classifier clf(model, co);
  int correct = 0;
  for (const auto& [cls, f] : files) {
    const auto top = clf.classify(decode_image((dir / "test" / cls / f).string()), 10);
    int64_t best = -1;
    float best_p = -1;
    for (const Prediction& p : top) {
      if ((p.index == 2 || p.index == 5 || p.index == 7) && p.probability > best_p) {
        best_p = p.probability;
        best = p.index;
      }
    }
    std::string predicted = "c";  // (appended: g++ 12 warns falsely on "c" + std::string)
    predicted += std::to_string(best);
    correct += predicted == cls;
  }
  EXPECT_NEAR(row["top1"].get<double>(), 100.0 * correct / 6, 1e-9);
  EXPECT_NEAR(row["top5"].get<double>(), 100.0, 1e-9);  // 3 outputs: always among the top 5
  // A class the valid labels leave out, and a class map that misses a folder, are errors.
  std::ofstream(dir / "valid.txt") << "2\n5\n";
  r = vitpe("eval --heads 4 --model " + model + " --dataset folder:" + dir.string() +
            " --class-map " + (dir / "classes.txt").string() + " --valid-labels " +
            (dir / "valid.txt").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("leaves out class 7 ('c7')"), std::string::npos) << r.out;
  std::ofstream(dir / "classes.txt") << "c0\nc1\nc2\n";
  r = vitpe("eval --heads 4 --model " + model + " --dataset folder:" + dir.string() +
            " --class-map " + (dir / "classes.txt").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("does not name the dataset's classes: c5, c7"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// classify --video: a short MJPEG video made at test time, every 2nd of 6 frames classified;
// each row equals classifying that frame saved as a PNG (read back through VideoCapture, so both
// see the same decoded pixels).
TEST(ClassifyResults, VideoFramesEqualTheirSavedImages) {
  const fs::path dir = fs::temp_directory_path() / ("vitpe_video_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string video = (dir / "clip.avi").string();
  {
    cv::VideoWriter w(video, cv::VideoWriter::fourcc('M', 'J', 'P', 'G'), 10.0, cv::Size(64, 48));
    ASSERT_TRUE(w.isOpened()) << "OpenCV cannot write MJPEG";
    for (int i = 0; i < 6; ++i) {
      cv::Mat f(48, 64, CV_8UC3, cv::Scalar(40 * i, 255 - 40 * i, 128));
      cv::rectangle(f, cv::Rect(4 * i, 8, 20, 20), cv::Scalar(255, 255, 255), cv::FILLED);
      w.write(f);
    }
  }
  CmdResult r = vitpe("classify --model vit-fmnist --topk 3 --no-progress --video " + video +
                      " --every 2 --results-file " + (dir / "frames.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = nlohmann::json::parse(read_text(dir / "frames.json"));
  ASSERT_EQ(rows.size(), 3u);
  cv::VideoCapture cap(video);
  cv::Mat f;
  for (int i = 0, k = 0; cap.read(f); ++i) {
    if (i % 2) continue;
    const std::string png = (dir / ("frame" + std::to_string(i) + ".png")).string();
    cv::imwrite(png, f);
    CmdResult one = vitpe("classify --json --topk 3 --model vit-fmnist " + png, "2>/dev/null");
    ASSERT_EQ(one.code, 0) << one.out;
    const auto want = nlohmann::json::parse(one.out)[0]["top"];
    const auto& got = rows[k++];
    EXPECT_NE(got["image"].get<std::string>().find("frame " + std::to_string(i)),
              std::string::npos);
    ASSERT_EQ(got["top"].size(), 3u);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(got["top"][j]["index"], want[j]["index"]) << "frame " << i;
      EXPECT_NEAR(got["top"][j]["probability"].get<double>(), want[j]["probability"].get<double>(),
                  1e-6);
    }
  }
  r = vitpe("classify --model vit-fmnist --video " + (dir / "missing.avi").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot be opened"), std::string::npos) << r.out;
  r = vitpe("classify --model vit-fmnist");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("give images or folders, or --video SOURCE"), std::string::npos) << r.out;
  r = vitpe("classify --model vit-fmnist --video 12345678");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("at most 6 digits"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// The command reads video through its module (libvitpe_video.so) and does not load OpenCV's
// videoio at its start: the dynamic loader's list for it has neither.
TEST(ClassifyVideo, TheCommandDoesNotLoadVideoioAtItsStart) {
  const std::string cmd = "LD_TRACE_LOADED_OBJECTS=1 " + std::string(VITPE_BINARY_DIR) + "/vitpe";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_NE(out.find("libvitpe.so"), std::string::npos) << out;  // the list is the loader's
  EXPECT_EQ(out.find("libopencv_videoio"), std::string::npos) << out;
  EXPECT_EQ(out.find("libvitpe_video"), std::string::npos) << out;
}

// A command without its video module beside it (nor in lib/vitpe of its install) still
// classifies images, and --video says which files it looked for and what to install.
TEST(ClassifyVideo, WithoutTheModuleSaysWhereItLookedAndWhatToInstall) {
  const fs::path dir =
      fs::temp_directory_path() / ("vitpe_no_module_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(std::string(VITPE_BINARY_DIR) + "/vitpe", dir / "vitpe");
  const auto run = [&](const std::string& args) {
    FILE* pipe = popen(((dir / "vitpe").string() + " " + args + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    while (pipe && std::fgets(buf, sizeof buf, pipe)) out += buf;
    const int status = pipe ? pclose(pipe) : -1;
    return CmdResult{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  };
  CmdResult r = run("classify --model vit-fmnist --video clip.avi");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("video module"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find((dir / "libvitpe_video.so").string() + " (no such file)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("apt install libopencv-videoio406"), std::string::npos) << r.out;
  r = run("classify --model vit-fmnist --topk 1 " + std::string(VITPE_TEST_DATA) +
          "/images/rgb_20x14.png");
  EXPECT_EQ(r.code, 0) << r.out;
  fs::remove_all(dir);
}
}  // namespace
}  // namespace vitpe
