// Tests of vit/preprocess against timm's evaluation transform (PIL 9.4 + timm 0.9.16 goldens in
// tests/data/preprocess_golden.safetensors, written by tests/golden/make_goldens.py), plus the
// decoding rules (grayscale, alpha, 16-bit), error messages and the batch helper.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "vit/io/preprocess.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

std::string image_path(const std::string& stem) {
  return std::string(VITPE_TEST_DATA) + "/images/" + stem + ".png";
}

Preprocess config(int rows, int cols, Interpolation interp) {
  Preprocess p;
  p.rows = rows;
  p.cols = cols;
  p.interpolation = interp;
  return p;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a.at(i)) - b.at(i)));
  }
  return m;
}

// ---- against timm ------------------------------------------------------------------------------

// Every golden is reproduced to the bit: we run PIL's integer resampling, torchvision's crop
// rounding and the same f32 normalisation. The bound is 1e-6 (normalised units) to allow
// an f32 rounding difference, not a uint8 one (one uint8 step is 1 / (255 * std) > 0.017).
constexpr double kGoldenTolerance = 1e-6;

// Preprocess::from takes everything from the model's config (the README's library example on
// the bundled Fashion-MNIST model once got ImageNet's 224 RGB defaults).
TEST(Preprocess, FromTheModelConfig) {
  const ModelConfig c = preset("vit-fmnist");
  const Preprocess p = Preprocess::from(c);
  EXPECT_EQ(p.rows, 28);
  EXPECT_EQ(p.cols, 28);
  EXPECT_EQ(p.channels, 1);
  EXPECT_EQ(p.crop_pct, c.preprocess.crop_pct);
  EXPECT_EQ(p.mean, std::vector<float>{kFashionMnistMean});
  EXPECT_EQ(p.std_dev, std::vector<float>{kFashionMnistStd});
  Tensor x = preprocess_file(image_path("rgb_67x45"), p);
  EXPECT_EQ(x.shape(), Shape({1, 28, 28}));
  ModelConfig rgb = preset("swin-tiny-patch4-window7-224");
  rgb.img_rows = 96;
  rgb.img_cols = 160;
  EXPECT_EQ(Preprocess::from(rgb).rows, 96);
  EXPECT_EQ(Preprocess::from(rgb).cols, 160);
  EXPECT_EQ(Preprocess::from(rgb).mean, kImageNetMean);
}

TEST(Preprocess, MatchesTimmEvalTransformBicubic32x32) {
  SafeTensorsFile golden =
      SafeTensorsFile::open(std::string(VITPE_TEST_DATA) + "/preprocess_golden.safetensors");
  int checked = 0;
  double worst = 0;
  for (const std::string stem :
       {"rgb_67x45", "gray_40x52", "rgba_50x50", "rgb16_36x30", "rgb_20x14"}) {
    Tensor want = golden.get(stem + "/32x32");
    Tensor got = preprocess_file(image_path(stem), config(32, 32, Interpolation::bicubic));
    double d = max_abs_diff(got, want);
    EXPECT_LE(d, kGoldenTolerance) << stem;
    worst = std::max(worst, d);
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  RecordProperty("max_abs_error", buf);
}

TEST(Preprocess, MatchesTimmEvalTransformNonSquare24x40) {
  SafeTensorsFile golden =
      SafeTensorsFile::open(std::string(VITPE_TEST_DATA) + "/preprocess_golden.safetensors");
  for (const std::string stem : {"rgb_67x45", "gray_40x52"}) {
    // timm resizes non-square targets bilinearly (ResizeKeepRatio), so the golden is bilinear.
    Tensor want = golden.get(stem + "/24x40");
    Tensor got = preprocess_file(image_path(stem), config(24, 40, Interpolation::bilinear));
    EXPECT_EQ(got.shape(), Shape({3, 24, 40}));
    EXPECT_LE(max_abs_diff(got, want), kGoldenTolerance) << stem;
  }
}

TEST(Preprocess, MatchesPilGrayscaleOneChannel) {
  SafeTensorsFile golden =
      SafeTensorsFile::open(std::string(VITPE_TEST_DATA) + "/preprocess_golden.safetensors");
  Preprocess cfg = config(32, 32, Interpolation::bicubic);
  cfg.channels = 1;
  cfg.mean = {0.5f};
  cfg.std_dev = {0.25f};
  for (const std::string stem : {"rgb_67x45", "gray_40x52"}) {
    Tensor want = golden.get(stem + "/gray_32x32");
    Tensor got = preprocess_file(image_path(stem), cfg);
    EXPECT_EQ(got.shape(), Shape({1, 32, 32}));
    EXPECT_LE(max_abs_diff(got, want), kGoldenTolerance) << stem;
  }
}

// ---- sizes and crop -----------------------------------------------------------------------------

TEST(Preprocess, ResizedSizeFollowsTorchvisionAndTimm) {
  // Square: shorter side floor(32 / 0.875) = 36, longer int(36 * 67 / 45) = 53.
  EXPECT_EQ(resized_size(67, 45, config(32, 32, Interpolation::bicubic)), cv::Size(53, 36));
  EXPECT_EQ(resized_size(45, 67, config(32, 32, Interpolation::bicubic)), cv::Size(36, 53));
  // 224 at 0.875: 256; 500x375 -> int(256 * 500 / 375) = 341.
  EXPECT_EQ(resized_size(500, 375, config(224, 224, Interpolation::bicubic)), cv::Size(341, 256));
  // Non-square 24x40: targets 27x45; ratio min(45/27, 67/45) = 67/45 -> 45 x round(30.22) = 30.
  EXPECT_EQ(resized_size(67, 45, config(24, 40, Interpolation::bilinear)), cv::Size(45, 30));
}

TEST(Preprocess, CropLargerThanImagePadsWithZeros) {
  // crop_pct 2: the shorter side becomes 16 (67x45 -> 23x16) and is zero-padded to 32x32,
  // left/top getting the smaller half (4 and 8), as torchvision's center_crop.
  cv::Mat img = read_image(image_path("rgb_67x45"));
  Preprocess cfg = config(32, 32, Interpolation::bicubic);
  cfg.crop_pct = 2.0;
  cv::Mat crop = resize_and_crop(img, cfg);
  cv::Mat small = pil_resize(img, 23, 16, Interpolation::bicubic);
  ASSERT_EQ(crop.size(), cv::Size(32, 32));
  for (int y = 0; y < 32; ++y) {
    for (int x = 0; x < 32; ++x) {
      const bool inside = y >= 8 && y < 24 && x >= 4 && x < 27;
      for (int c = 0; c < 3; ++c) {
        const int want = inside ? small.at<cv::Vec3b>(y - 8, x - 4)[c] : 0;
        ASSERT_EQ(crop.at<cv::Vec3b>(y, x)[c], want) << y << "," << x;
      }
    }
  }
}

TEST(Preprocess, PilResizeKeepsAConstantImageConstant) {
  // The fixed-point weights of every output pixel sum to 2^22 up to rounding, which the final
  // rounding absorbs: a flat image stays flat when shrinking and when enlarging.
  cv::Mat flat(17, 23, CV_8UC3, cv::Scalar(200, 3, 255));
  for (auto interp : {Interpolation::bicubic, Interpolation::bilinear}) {
    for (cv::Size s : {cv::Size(7, 5), cv::Size(50, 41), cv::Size(23, 9)}) {
      cv::Mat r = pil_resize(flat, s.width, s.height, interp);
      ASSERT_EQ(r.size(), s);
      for (int y = 0; y < r.rows; ++y) {
        for (int x = 0; x < r.cols; ++x) ASSERT_EQ(r.at<cv::Vec3b>(y, x), cv::Vec3b(200, 3, 255));
      }
    }
  }
}

// Pillow (13) resizes in two passes that round to uint8 in between, the horizontal first unless
// the height shrinks by more than twice the width: each case equals its two one-axis resizes in
// that order (and, where the orders' roundings differ, not the other order).
TEST(Preprocess, PilResizePassOrderIsPillows) {
  cv::Mat img(33, 17, CV_8UC3);
  cv::randu(img, 0, 256);
  auto same = [](const cv::Mat& a, const cv::Mat& b) { return cv::norm(a, b, cv::NORM_INF) == 0; };
  struct Case {
    int w, h;
    bool vertical_first;
  };
  // 17x33 -> 32x32: height -1, width +15 (vertical first); -> 12x20: height -13 > 2 * 5;
  // -> 10x20: height -13 < 2 * 7 (horizontal first); -> 40x60: both grow (horizontal first).
  for (const Case& c : {Case{32, 32, true}, Case{12, 20, true}, Case{10, 20, false},
                        Case{40, 60, false}}) {
    for (auto interp : {Interpolation::bicubic, Interpolation::bilinear}) {
      const cv::Mat got = pil_resize(img, c.w, c.h, interp);
      const cv::Mat v_first = pil_resize(pil_resize(img, img.cols, c.h, interp), c.w, c.h, interp);
      const cv::Mat h_first = pil_resize(pil_resize(img, c.w, img.rows, interp), c.w, c.h, interp);
      EXPECT_TRUE(same(got, c.vertical_first ? v_first : h_first))
          << c.w << "x" << c.h << " " << interpolation_name(interp);
    }
  }
  // The order shows: for the tall training crop the two orders differ somewhere.
  EXPECT_FALSE(same(pil_resize(pil_resize(img, 17, 32, Interpolation::bicubic), 32, 32,
                               Interpolation::bicubic),
                    pil_resize(pil_resize(img, 32, 33, Interpolation::bicubic), 32, 32,
                               Interpolation::bicubic)));
}

// ---- decoding ----------------------------------------------------------------------------------

TEST(Preprocess, GrayscaleIsReplicatedToThreeChannels) {
  cv::Mat rgb = read_image(image_path("gray_40x52"));
  cv::Mat gray = cv::imread(image_path("gray_40x52"), cv::IMREAD_UNCHANGED);
  ASSERT_EQ(gray.type(), CV_8UC1);
  ASSERT_EQ(rgb.type(), CV_8UC3);
  ASSERT_EQ(rgb.size(), cv::Size(40, 52));
  for (int y = 0; y < rgb.rows; ++y) {
    for (int x = 0; x < rgb.cols; ++x) {
      const uint8_t g = gray.at<uint8_t>(y, x);
      ASSERT_EQ(rgb.at<cv::Vec3b>(y, x), cv::Vec3b(g, g, g));
    }
  }
  EXPECT_EQ(read_image(image_path("gray_40x52"), 1).type(), CV_8UC1);
}

TEST(Preprocess, AlphaIsDroppedAndBgrBecomesRgb) {
  cv::Mat bgra = cv::imread(image_path("rgba_50x50"), cv::IMREAD_UNCHANGED);
  ASSERT_EQ(bgra.type(), CV_8UC4);
  cv::Mat rgb = read_image(image_path("rgba_50x50"));
  ASSERT_EQ(rgb.type(), CV_8UC3);
  for (int y = 0; y < rgb.rows; ++y) {
    for (int x = 0; x < rgb.cols; ++x) {
      const cv::Vec4b p = bgra.at<cv::Vec4b>(y, x);
      ASSERT_EQ(rgb.at<cv::Vec3b>(y, x), cv::Vec3b(p[2], p[1], p[0]));
    }
  }
}

TEST(Preprocess, SixteenBitKeepsTheHighByte) {
  for (const std::string stem : {"rgb16_36x30", "gray16_30x30"}) {
    cv::Mat raw = cv::imread(image_path(stem), cv::IMREAD_UNCHANGED);
    ASSERT_EQ(raw.depth(), CV_16U) << stem;
    cv::Mat rgb = read_image(image_path(stem));
    ASSERT_EQ(rgb.type(), CV_8UC3);
    ASSERT_EQ(rgb.size(), raw.size());
    for (int y = 0; y < rgb.rows; ++y) {
      for (int x = 0; x < rgb.cols; ++x) {
        for (int c = 0; c < 3; ++c) {
          const int src_c = raw.channels() == 1 ? 0 : 2 - c;
          ASSERT_EQ(rgb.at<cv::Vec3b>(y, x)[c],
                    raw.ptr<uint16_t>(y)[x * raw.channels() + src_c] >> 8);
        }
      }
    }
  }
  // Through the whole transform: shapes.
  EXPECT_EQ(
      preprocess_file(image_path("gray16_30x30"), config(24, 24, Interpolation::bicubic)).shape(),
      Shape({3, 24, 24}));
}

// ---- errors -------------------------------------------------------------------------------------

void expect_error_naming(const std::string& file, const Preprocess& cfg) {
  try {
    preprocess_file(file, cfg);
    ADD_FAILURE() << "expected an error for " << file;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST(Preprocess, UnreadableFilesAreErrorsNamingTheFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("vitpe_preprocess_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string garbage = (dir / "garbage.png").string();
  std::ofstream(garbage) << "this is not a png";
  const Preprocess cfg = config(32, 32, Interpolation::bicubic);
  expect_error_naming((dir / "missing.jpg").string(), cfg);
  expect_error_naming(garbage, cfg);
  expect_error_naming(dir.string(), cfg);  // a directory
  fs::remove_all(dir);
}

// A thin image (65535x1 once took 13 GB and 87 s for ViT-S) is refused by the pixel budget
// before anything is resized; a wide but ordinary one still goes through.
TEST(Preprocess, ExtremeAspectRatiosStayWithinThePixelBudget) {
  Preprocess p = config(224, 224, Interpolation::bicubic);
  for (cv::Size s : {cv::Size(65535, 1), cv::Size(1, 8192)}) {
    cv::Mat thin(s, CV_8UC3, cv::Scalar::all(128));
    try {
      resize_and_crop(thin, p);
      ADD_FAILURE() << s.width << "x" << s.height << ": expected an error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("aspect ratio is too extreme"), std::string::npos)
          << e.what();
    }
  }
  cv::Mat wide(500, 4000, CV_8UC3, cv::Scalar::all(128));
  EXPECT_EQ(resize_and_crop(wide, p).size(), cv::Size(224, 224));
}

TEST(Preprocess, InvalidConfigIsAnError) {
  Preprocess cfg = config(32, 32, Interpolation::bicubic);
  cfg.channels = 1;  // mean/std still have 3 values
  EXPECT_THROW(cfg.validate(), std::invalid_argument);
  cfg = config(0, 32, Interpolation::bicubic);
  EXPECT_THROW(cfg.validate(), std::invalid_argument);
  EXPECT_THROW(parse_interpolation("nearest"), std::invalid_argument);
  EXPECT_EQ(parse_interpolation("bilinear"), Interpolation::bilinear);
}

// ---- batch --------------------------------------------------------------------------------------

TEST(Preprocess, BatchFillsEachImageAndReportsFailuresByName) {
  const Preprocess cfg = config(32, 32, Interpolation::bicubic);
  const std::string missing = image_path("does_not_exist");
  const std::vector<std::string> paths = {image_path("rgb_67x45"), missing,
                                          image_path("gray_40x52")};
  std::vector<std::string> errors;
  Tensor batch = preprocess_files(paths, cfg, &errors);
  ASSERT_EQ(batch.shape(), Shape({3, 3, 32, 32}));
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_TRUE(errors[0].empty());
  EXPECT_NE(errors[1].find(missing), std::string::npos) << errors[1];
  EXPECT_TRUE(errors[2].empty());
  for (int b : {0, 2}) {
    Tensor one = preprocess_file(paths[b], cfg);
    Tensor row = batch.slice(b, b + 1);
    for (int64_t i = 0; i < one.numel(); ++i) ASSERT_EQ(row.at(i), one.at(i));
  }
  Tensor failed = batch.slice(1, 2);
  for (int64_t i = 0; i < failed.numel(); ++i) ASSERT_EQ(failed.at(i), 0.0f);

  try {
    preprocess_files(paths, cfg);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vitpe
