// The evaluation transform each model family carries (timm's pretrained_cfg for its presets,
// torchvision's weights transforms for torchvision files) against the families' own transforms:
// goldens from timm 1.0 / torchvision 0.29 with Pillow on a JPEG and a PNG
// (tests/golden/make_transform_goldens.py, tests/data/README.md). timm resizes with PIL, which
// vitpe reproduces to the bit; torchvision's weights resize a uint8 tensor with its own
// antialiased kernels, which vitpe approximates with PIL's (the tolerance is stated below).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "tests/testing.h"
#include "vit/io/checkpoint.h"
#include "vit/io/preprocess.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

const std::string kData = VITPE_TEST_DATA;

struct Golden {
  SafeTensorsFile file = SafeTensorsFile::open(kData + "/transform_golden.safetensors");
  nlohmann::json families = nlohmann::json::parse(file.metadata().at("families"));
  // [H, W, C] uint8 as stored.
  cv::Mat image(const std::string& name) const {
    const TensorInfo& info = file.info(name);
    EXPECT_EQ(info.dtype, "U8") << name;
    const auto bytes = file.raw(name);
    cv::Mat m(static_cast<int>(info.shape[0]), static_cast<int>(info.shape[1]), CV_8UC3);
    std::memcpy(m.data, bytes.data(), bytes.size());
    return m;
  }
};

const std::vector<std::pair<std::string, std::string>> kTransformImages = {
    {"photo_61x47", "/images/photo_61x47.jpg"}, {"rgb_67x45", "/images/rgb_67x45.png"}};

int max_abs_difference(const cv::Mat& a, const cv::Mat& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.type(), b.type());
  if (a.size() != b.size() || a.type() != b.type()) return 255;
  cv::Mat d;
  cv::absdiff(a, b, d);
  double most = 0;
  cv::minMaxLoc(d.reshape(1), nullptr, &most);
  return static_cast<int>(most);
}

void expect_config_matches(const Preprocess& p, const nlohmann::json& f, const std::string& fam) {
  EXPECT_EQ(p.rows, f["input_size"][1].get<int>()) << fam;
  EXPECT_DOUBLE_EQ(p.crop_pct, f["crop_pct"].get<double>()) << fam;
  EXPECT_STREQ(crop_mode_name(p.crop_mode), f["crop_mode"].get<std::string>().c_str()) << fam;
  EXPECT_STREQ(interpolation_name(p.interpolation), f["interpolation"].get<std::string>().c_str())
      << fam;
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(p.mean[c], f["mean"][c].get<float>()) << fam;
    EXPECT_FLOAT_EQ(p.std_dev[c], f["std"][c].get<float>()) << fam;
  }
}

ModelConfig at_size(ModelConfig c, int64_t size) {
  c.img_rows = c.img_cols = size;
  return c;
}

// JPEG and PNG decode to the same RGB bytes as PIL's Image.open(f).convert('RGB').
TEST(Transforms, DecodingEqualsPil) {
  const Golden g;
  for (const auto& [stem, file] : kTransformImages) {
    EXPECT_EQ(max_abs_difference(read_image(kData + file, 3), g.image(stem + "/decoded")), 0)
        << stem;
  }
}

// The presets carry timm's pretrained_cfg (vit_small_patch16_224: augreg, mean = std = 0.5, crop
// 0.9; swin_tiny_patch4_window7_224: ImageNet, crop 0.9) and reproduce timm's transform exactly.
TEST(Transforms, TimmPresetsEqualTimmsTransformBitwise) {
  const Golden g;
  const std::vector<std::pair<std::string, ModelConfig>> families = {
      {"timm_vit", preset("vit_small_patch16_224")},
      {"timm_swin", preset("swin_tiny_patch4_window7_224")},
      {"timm_squash", [] {
         ModelConfig c = preset("vit_small_patch16_224");
         c.preprocess.crop_mode = CropMode::squash;
         c.preprocess.crop_pct = 0.95;
         return c;
       }()}};
  for (const auto& [fam, config] : families) {
    const nlohmann::json& f = g.families.at(fam);
    const Preprocess p = Preprocess::from(at_size(config, f["input_size"][1].get<int64_t>()));
    expect_config_matches(p, f, fam);
    for (const auto& [stem, file] : kTransformImages) {
      const cv::Mat ours = resize_and_crop(read_image(kData + file, 3), p);
      EXPECT_EQ(max_abs_difference(ours, g.image(stem + "/" + fam)), 0) << fam << " " << stem;
    }
  }
}

// torchvision files get their weights' transform: ViT resize 256 -> crop 224 bilinear, Swin-T
// resize 232 -> 224 bicubic (the same ratios at 32 px). torchvision resizes a uint8 tensor with
// its own antialiased kernels; vitpe uses PIL's, which differ from them by at most 1 level of
// 255 bilinear and 5 bicubic on these images (measured; the bicubic case is the noisy PNG).
TEST(Transforms, TorchvisionFilesGetTheirWeightsTransform) {
  const Golden g;
  for (const auto& [fam, file, tolerance] : {std::tuple{"tv_vit", "/vit_tv.safetensors", 2},
                                             std::tuple{"tv_swin", "/swin_tv.safetensors", 6}}) {
    LoadOptions o;
    o.heads = std::string(fam) == "tv_vit" ? 4 : 0;  // ViT files do not store them
    const LoadedModel m = load_model(kData + file, o);
    Preprocess p = Preprocess::from(m.model->config());
    p.rows = p.cols = 32;  // the goldens' size; the file's is 32 (ViT) or 56 (Swin)
    const nlohmann::json& f = g.families.at(fam);
    EXPECT_STREQ(interpolation_name(p.interpolation),
                 f["interpolation"].get<std::string>().c_str());
    EXPECT_DOUBLE_EQ(p.crop_pct, 224.0 / f["resize_224"].get<double>()) << fam;
    EXPECT_EQ(resized_size(67, 45, p).height, f["resize"].get<int>()) << fam;
    EXPECT_EQ(p.mean, kImageNetMean);
    for (const auto& [stem, image] : kTransformImages) {
      const cv::Mat ours = resize_and_crop(read_image(kData + image, 3), p);
      const int diff = max_abs_difference(ours, g.image(stem + "/" + fam));
      EXPECT_LE(diff, tolerance) << fam << " " << stem;
      std::printf("%s %s: max |vitpe - torchvision| = %d levels\n", fam, stem.c_str(), diff);
    }
  }
}

// A timm hub download: the weights with timm's config.json beside them. Its pretrained_cfg and
// label_names travel into the model's config; a bad one is an error naming it.
class ConfigJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vitpe_config_json_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::filesystem::copy_file(kData + "/vit_timm.safetensors", dir_ / "model.safetensors");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const nlohmann::json& j) { std::ofstream(dir_ / "config.json") << j.dump(); }
  std::string weights() const { return (dir_ / "model.safetensors").string(); }
  // The file's heads: timm's files do not store them, and "vit_tiny_test" is no preset.
  static LoadOptions heads() {
    LoadOptions o;
    o.heads = 4;
    return o;
  }
  static nlohmann::json timm_json() {
    nlohmann::json labels = nlohmann::json::array();
    for (int i = 0; i < 10; ++i) labels.push_back("class_" + std::to_string(i));
    return {{"architecture", "vit_tiny_test"},
            {"num_classes", 10},
            {"pretrained_cfg",
             {{"input_size", {3, 32, 32}},
              {"interpolation", "bilinear"},
              {"crop_pct", 0.95},
              {"crop_mode", "squash"},
              {"mean", {0.5, 0.5, 0.5}},
              {"std", {0.5, 0.25, 0.5}}}},
            {"label_names", labels}};
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigJson, PretrainedCfgAndLabelNamesTravelWithTheWeights) {
  write(timm_json());
  const LoadedModel m = load_model(weights(), heads());
  const ModelConfig& c = m.model->config();
  EXPECT_EQ(c.name, "vit_tiny_test");
  EXPECT_EQ(c.img_rows, 32);
  EXPECT_EQ(c.preprocess.interpolation, Interpolation::bilinear);
  EXPECT_EQ(c.preprocess.crop_mode, CropMode::squash);
  EXPECT_DOUBLE_EQ(c.preprocess.crop_pct, 0.95);
  EXPECT_EQ(c.preprocess.std_dev, (std::vector<float>{0.5f, 0.25f, 0.5f}));
  ASSERT_EQ(c.labels.size(), 10u);
  EXPECT_EQ(c.labels[3], "class_3");
  bool noted = false;
  for (const std::string& n : m.notes) noted |= n.find("config.json") != std::string::npos;
  EXPECT_TRUE(noted);

  // Flags win over the file; without reading config.json the file's defaults apply.
  LoadOptions o = heads();
  o.preprocess.crop_pct = 1.0;
  o.preprocess.interpolation = Interpolation::bicubic;
  EXPECT_DOUBLE_EQ(load_model(weights(), o).model->config().preprocess.crop_pct, 1.0);
  EXPECT_EQ(load_model(weights(), o).model->config().preprocess.interpolation,
            Interpolation::bicubic);
  o = heads();
  o.read_config_json = false;
  EXPECT_EQ(load_model(weights(), o).model->config().preprocess.mean, kImageNetMean);
}

// A config.json naming a model of another family (a ResNet's beside ViT weights) is a mistake:
// the file is not silently taken for the weights' own.
TEST_F(ConfigJson, AnotherFamilysArchitectureIsAnError) {
  nlohmann::json j = timm_json();
  j["architecture"] = "resnet50";
  write(j);
  const std::string m = testing::message_of([&] { load_model(weights(), heads()); });
  EXPECT_NE(m.find("names the architecture 'resnet50'"), std::string::npos) << m;
  EXPECT_NE(m.find("is a timm ViT checkpoint"), std::string::npos) << m;
  j["architecture"] = "swin_tiny_patch4_window7_224";  // a preset, but of another family
  write(j);
  const std::string m2 = testing::message_of([&] { load_model(weights(), heads()); });
  EXPECT_NE(m2.find("preset 'swin_tiny_patch4_window7_224' is of family 'swin'"), std::string::npos)
      << m2;
}

TEST_F(ConfigJson, ABadConfigJsonIsAnErrorNamingIt) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["num_classes"] = 1000; }, "num_classes is 1000"},
      {[](nlohmann::json& j) {
         j["pretrained_cfg"]["mean"] = {0.5, 0.5};
       },
       "expected 3 numbers"},
      {[](nlohmann::json& j) { j["pretrained_cfg"]["crop_mode"] = "border"; }, "'border'"},
      {[](nlohmann::json& j) { j["pretrained_cfg"]["interpolation"] = "lanczos"; }, "lanczos"},
      {[](nlohmann::json& j) {
         j["pretrained_cfg"]["input_size"] = {1, 32, 32};
       },
       "channels"},
      {[](nlohmann::json& j) {
         j["label_names"] = {"a", "b"};
       },
       "expected 10 names"},
      {[](nlohmann::json& j) { j.erase("pretrained_cfg"); }, "pretrained_cfg"},
  };
  for (const auto& [edit, expected] : cases) {
    nlohmann::json j = timm_json();
    edit(j);
    write(j);
    const std::string m = testing::message_of([&] { load_model(weights(), heads()); });
    EXPECT_NE(m.find("config.json"), std::string::npos) << m;
    EXPECT_NE(m.find(expected), std::string::npos) << expected << ": " << m;
  }
  std::ofstream(dir_ / "config.json") << std::string(100000, '[') << std::string(100000, ']');
  EXPECT_NE(testing::message_of([&] { load_model(weights(), heads()); }).find("nests deeper"),
            std::string::npos);
  std::ofstream(dir_ / "config.json") << "{\"pretrained_cfg\": ";
  EXPECT_NE(testing::message_of([&] { load_model(weights(), heads()); }).find("not valid JSON"),
            std::string::npos);
  // 3.9 MB of empty objects (under the 4 MiB cap) took over two minutes with a depth check that
  // rescanned; the bounded reader stops at its array limit.
  {
    std::ofstream out(dir_ / "config.json");
    out << "[{}";
    for (int i = 1; i < 1300000; ++i) out << ",{}";
    out << "]";
  }
  const std::string m = testing::message_of([&] { load_model(weights()); });
  EXPECT_NE(m.find("an array of more than 65536 elements at the top level"), std::string::npos)
      << m;
}

// Presets answer to timm's names and to vitpe's dashed spellings; a near miss gets suggestions.
TEST(Presets, TimmNamesAliasesAndSuggestions) {
  EXPECT_EQ(preset("vit_small_patch16_224").name, "vit_small_patch16_224");
  EXPECT_EQ(preset("vit-small-patch16-224").name, "vit_small_patch16_224");
  EXPECT_TRUE(is_preset("swin-tiny-patch4-window7-224"));
  // The 1000-class presets name ImageNet's classes in timm's order.
  const ModelConfig swin = preset("swin_tiny_patch4_window7_224");
  ASSERT_EQ(swin.labels.size(), 1000u);
  EXPECT_EQ(swin.labels[0], "tench");
  EXPECT_EQ(swin.labels[207], "golden retriever");
  EXPECT_EQ(swin.labels[999], "toilet tissue");
  const std::string m = testing::message_of([] { preset("vit_smal_patch16_224"); });
  EXPECT_NE(m.find("did you mean vit_small_patch16_224"), std::string::npos) << m;
  const std::string f = testing::message_of([] { load_model("vit_base_patch16_244"); });
  EXPECT_NE(f.find("neither a checkpoint file nor a preset; did you mean vit_base_patch16_224"),
            std::string::npos)
      << f;
  EXPECT_TRUE(closest_presets("resnet50").empty());
}

// timm's training transform after its random draws (RandomResizedCropAndInterpolation's
// F.resized_crop to 32x32 and RandomHorizontalFlip) for boxes that shrink, grow, keep the output
// size (PIL copies it unfiltered), take the whole image and make Pillow run its vertical pass
// first (a tall box whose height shrinks): the same floats as ToTensor and
// Normalize of torchvision's uint8 result, to the bit (tests/golden/make_transform_goldens.py).
TEST(Transforms, TrainingCropEqualsTimmsResizedCropAndFlip) {
  const SafeTensorsFile f = SafeTensorsFile::open(kData + "/train_transform_golden.safetensors");
  const nlohmann::json boxes = nlohmann::json::parse(f.metadata().at("boxes"));
  ASSERT_EQ(boxes.size(), 5u);
  int compared = 0;
  for (const auto& [stem, file] : kTransformImages) {
    const cv::Mat img = read_image(kData + file, 3);
    for (size_t k = 0; k < boxes.size(); ++k) {
      CropBox box;
      box.top = boxes[k][0];
      box.left = boxes[k][1];
      box.height = boxes[k][2];
      box.width = boxes[k][3];
      const bool flip = boxes[k][4];
      // The whole 61x47 photo does not fit in the 67x45 image (PIL would pad it; timm never
      // draws such a box).
      if (box.top + box.height > img.rows || box.left + box.width > img.cols) continue;
      for (Interpolation interp : {Interpolation::bicubic, Interpolation::bilinear}) {
        const std::string name =
            stem + "/" + std::to_string(k) + "/" + interpolation_name(interp);
        const TensorInfo& info = f.info(name);
        ASSERT_EQ(info.shape, (std::vector<int64_t>{32, 32, 3})) << name;
        const auto want = f.raw(name);
        Preprocess p;
        p.rows = p.cols = 32;
        p.interpolation = interp;
        p.mean = {0.5f, 0.4f, 0.3f};
        p.std_dev = {0.25f, 0.2f, 0.3f};
        std::vector<float> got(3 * 32 * 32);
        resized_crop_into(img, box, flip, p, got.data());
        for (int y = 0; y < 32; ++y) {
          for (int x = 0; x < 32; ++x) {
            for (int c = 0; c < 3; ++c) {
              const float v = static_cast<float>(want[(y * 32 + x) * 3 + c]) / 255.0f;
              ASSERT_EQ(got[c * 1024 + y * 32 + x], (v - p.mean[c]) / p.std_dev[c])
                  << name << " at " << x << "," << y << " channel " << c;
            }
          }
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 18);
  // A box that leaves the image says so.
  const cv::Mat img = read_image(kData + "/images/rgb_67x45.png", 3);
  Preprocess p;
  p.rows = p.cols = 8;
  std::vector<float> out(3 * 64);
  CropBox outside;
  outside.top = 40;
  outside.height = 10;
  outside.width = 10;
  const std::string m =
      testing::message_of([&] { resized_crop_into(img, outside, false, p, out.data()); });
  EXPECT_NE(m.find("not inside the 67x45 image"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
