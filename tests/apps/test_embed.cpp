// `vitpe embed`: the features it writes equal Classifier::embed's for the same images, in each
// output format; a bad --out, an existing file, an unreadable image and an empty folder are
// errors that leave no file behind (and an existing one untouched).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/run_vitpe.h"
#include "vit/io/classifier.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;
using testing::CmdResult;
using testing::vitpe;

std::string image(const std::string& name) {
  return std::string(VITPE_TEST_DATA) + "/images/" + name;
}

const std::vector<std::string> kImages = {image("gray_40x52.png"), image("rgb_20x14.png"),
                                          image("rgba_50x50.png")};

std::string image_args() {
  std::string s;
  for (const auto& p : kImages) s += " " + p;
  return s;
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("vitpe_embed_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string at(const std::string& name) const { return (dir / name).string(); }
};

std::vector<std::vector<float>> classifier_embeddings(bool normalize) {
  Classifier c("vit-fmnist");
  std::vector<cv::Mat> mats;
  for (const auto& p : kImages) mats.push_back(cv::imread(p, cv::IMREAD_UNCHANGED));
  return c.embed(mats, normalize);
}

void expect_rows(const std::vector<std::vector<float>>& want, const float* got, int64_t D,
                 const std::string& what) {
  ASSERT_EQ(D, static_cast<int64_t>(want.front().size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    for (int64_t j = 0; j < D; ++j) {
      ASSERT_NEAR(got[i * D + j], want[i][j], 1e-5 * (1 + std::fabs(want[i][j])))
          << what << " image " << i << " feature " << j;
    }
  }
}

TEST(Embed, SafetensorsNpyAndCsvHoldTheClassifiersEmbeddings) {
  Scratch s;
  const auto want = classifier_embeddings(false);
  CmdResult r = vitpe("embed --no-progress --model vit-fmnist" + image_args() + " --out " +
                      s.at("f.safetensors"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 images x 128 features"), std::string::npos) << r.out;
  SafeTensorsFile f = SafeTensorsFile::open(s.at("f.safetensors"));
  const Tensor t = f.get("features");
  ASSERT_EQ(t.shape(), (Shape{3, 128}));
  expect_rows(want, t.f32(), 128, "safetensors");
  const auto names = nlohmann::json::parse(f.metadata().at("images"));
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[2].get<std::string>(), kImages[2]);

  // .npy: the array after its header, which names the shape.
  r = vitpe("embed --no-progress --model vit-fmnist" + image_args() + " --out " + s.at("f.npy"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(s.at("f.npy"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t header = 10 + static_cast<unsigned char>(bytes[8]) +
                        256 * static_cast<unsigned char>(bytes[9]);
  EXPECT_EQ(header % 64, 0u);
  EXPECT_NE(bytes.find("'shape': (3, 128)"), std::string::npos);
  ASSERT_EQ(bytes.size(), header + 3 * 128 * sizeof(float));
  expect_rows(want, reinterpret_cast<const float*>(bytes.data() + header), 128, "npy");

  // .csv with --normalize: unit vectors, the path first on each row.
  const auto unit = classifier_embeddings(true);
  r = vitpe("embed --no-progress --normalize --model vit-fmnist" + image_args() + " --out " +
            s.at("f.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream csv(s.at("f.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line.substr(0, 12), "image,f0,f1,");
  std::vector<float> values;
  for (int i = 0; i < 3 && std::getline(csv, line); ++i) {
    EXPECT_EQ(line.substr(0, kImages[i].size()), kImages[i]);
    std::stringstream ss(line.substr(kImages[i].size() + 1));
    std::string v;
    while (std::getline(ss, v, ',')) values.push_back(std::stof(v));
  }
  ASSERT_EQ(values.size(), 3u * 128);
  expect_rows(unit, values.data(), 128, "csv");
  double norm = 0;
  for (int j = 0; j < 128; ++j) norm += values[j] * values[j];
  EXPECT_NEAR(norm, 1.0, 1e-5);
}

TEST(Embed, AFolderIsItsImagesSortedByName) {
  Scratch s;
  fs::create_directories(s.dir / "imgs");
  for (const auto& p : kImages) fs::copy_file(p, s.dir / "imgs" / fs::path(p).filename());
  std::ofstream(s.dir / "imgs" / "notes.txt") << "not an image";
  CmdResult r = vitpe("embed --no-progress --model vit-fmnist " + s.at("imgs") + " --out " +
                      s.at("f.safetensors"));
  ASSERT_EQ(r.code, 0) << r.out;
  SafeTensorsFile f = SafeTensorsFile::open(s.at("f.safetensors"));
  EXPECT_EQ(f.get("features").shape(), (Shape{3, 128}));
  const auto names = nlohmann::json::parse(f.metadata().at("images"));
  EXPECT_NE(names[0].get<std::string>().find("gray_40x52.png"), std::string::npos);
  expect_rows(classifier_embeddings(false), f.get("features").f32(), 128, "folder");
}

TEST(Embed, BadOutputsUnreadableImagesAndEmptyFoldersLeaveNoFile) {
  Scratch s;
  CmdResult r = vitpe("embed --model vit-fmnist" + image_args() + " --out " + s.at("f.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("expected a .safetensors, .npy or .csv file"), std::string::npos) << r.out;
  r = vitpe("embed --model vit-fmnist" + image_args() + " --out " + s.at("no/such/f.npy"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;

  std::ofstream(s.at("kept.npy")) << "old";
  r = vitpe("embed --model vit-fmnist" + image_args() + " --out " + s.at("kept.npy"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("exists already (kept; pass --overwrite"), std::string::npos) << r.out;
  std::ifstream kept(s.at("kept.npy"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "old");

  r = vitpe("embed --no-progress --model vit-fmnist " + kImages[0] +
            " /nonexistent/picture.png --out " + s.at("f.npy"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/picture.png"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(s.at("f.npy")));

  fs::create_directories(s.dir / "empty");
  r = vitpe("embed --model vit-fmnist " + s.at("empty") + " --out " + s.at("f.npy"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the folder holds no image files"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(s.at("f.npy")));
  for (const auto& e : fs::directory_iterator(s.dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// classify on a model without a head says to embed; the Classifier refuses it too.
TEST(Embed, AHeadlessModelIsNotClassified) {
  CmdResult r = vitpe("classify --model vit_base_patch16_siglip_gap_224 " + kImages[1]);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no classifier head"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vitpe embed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace vitpe
