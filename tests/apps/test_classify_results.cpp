// `vitpe classify` on folders with a results file (timm's inference.py table): every image a row,
// a corrupt one a row naming its error, the same predictions as the printed ones, CSV and JSON;
// an existing results file is kept without --overwrite.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/apps/run_vitpe.h"

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

}  // namespace
}  // namespace vitpe
