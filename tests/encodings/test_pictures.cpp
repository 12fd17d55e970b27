// Pictures: every kind draws the files pictures.h promises, they decode as PNGs of a sensible size,
// use the colour map's two ends where the data has both signs, and leave no temporary files.
#include <filesystem>
#include <opencv2/imgcodecs.hpp>

#include "encodings/pictures.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

std::string out_dir(const std::string& name) {
  fs::path d = fs::path(VITPE_BINARY_DIR) / "test_pictures" / name;
  fs::remove_all(d);
  return d.string();
}

// Counts strongly blue and strongly red pixels (the diverging map's ends).
std::pair<int, int> blue_red(const cv::Mat& img) {
  int blue = 0, red = 0;
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x) {
      cv::Vec3b p = img.at<cv::Vec3b>(y, x);
      if (p[0] > p[2] + 60) ++blue;
      if (p[2] > p[0] + 60) ++red;
    }
  return {blue, red};
}

TEST(Pictures, EveryKindWritesReadablePngs) {
  struct Case {
    std::string spec;
    std::vector<std::string> files;
  };
  const std::vector<Case> cases = {
      {"sincos2d", {"sincos2d_values.png", "sincos2d_similarity.png"}},
      {"learned1d+relbias",
       {"learned1d_values.png", "learned1d_similarity.png", "relbias_attention.png"}},
      {"rope-mixed", {"rope-mixed_attention.png", "rope-mixed_phase.png"}},
      {"alibi2d", {"alibi2d_attention.png"}},
      {"none", {}}};
  PictureOptions o;
  o.grid = {6, 9};
  o.dim = 64;
  o.heads = 4;
  for (const auto& c : cases) {
    std::string dir = out_dir(c.spec == "learned1d+relbias" ? "combo" : c.spec);
    auto paths = write_encoding_pictures(c.spec, o, dir);
    ASSERT_EQ(paths.size(), c.files.size()) << c.spec;
    for (size_t i = 0; i < paths.size(); ++i) {
      EXPECT_EQ(fs::path(paths[i]).filename(), c.files[i]);
      cv::Mat img = cv::imread(paths[i], cv::IMREAD_COLOR);
      ASSERT_FALSE(img.empty()) << paths[i];
      EXPECT_GT(img.cols, 300);
      EXPECT_GT(img.rows, 200);
    }
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      EXPECT_NE(e.path().extension(), ".tmp") << e.path();
    }
  }
  // sincos values span [-1, 1]: both ends of the diverging map appear.
  auto paths = write_encoding_pictures("sincos2d", o, out_dir("sincos2d"));
  auto [blue, red] = blue_red(cv::imread(paths[0]));
  EXPECT_GT(blue, 1000);
  EXPECT_GT(red, 1000);
  EXPECT_THROW(write_encoding_pictures("rope-axial", {{4, 4}, 60, 7, 1, 0}, out_dir("bad")),
               std::invalid_argument);
}

// The phase picture's marks: a 6x6 window met by a rope part built for 4x4 reaches offsets of 5
// extrapolated (integer coordinates) and 5 * 4/6 interpolated (coordinates rescaled by 4/6, as
// timm's ref_feat_shape does), per axis; a bias kind has no phase.
TEST(Pictures, PhaseReachFollowsThePolicy) {
  for (const std::string kind : {"rope-axial", "rope-mixed"}) {
    Rng rng(3);
    auto att = make_attention_encoding(parse_encoding(kind), 2, 16, {4, 4}, 1, rng);
    ASSERT_TRUE(att) << kind;
    const AttnGeometry built{{4, 4}, 1}, wide{{6, 8}, 1};
    att->set_extension_policy(ExtensionPolicy::extrapolate);
    PhaseReach e = phase_reach(*att, built, wide, "e");
    EXPECT_NEAR(e.x, 7.0, 1e-5) << kind;
    EXPECT_NEAR(e.y, 5.0, 1e-5) << kind;
    att->set_extension_policy(ExtensionPolicy::interpolate);
    PhaseReach i = phase_reach(*att, built, wide, "i");
    EXPECT_NEAR(i.x, 7.0 * 4 / 8, 1e-5) << kind;
    EXPECT_NEAR(i.y, 5.0 * 4 / 6, 1e-5) << kind;
    auto paths = write_phase_picture(*att, 2, built, {e, i}, out_dir("phase-" + kind), kind);
    ASSERT_EQ(paths.size(), 1u);
    cv::Mat img = cv::imread(paths[0], cv::IMREAD_COLOR);
    ASSERT_FALSE(img.empty());
    auto [blue, red] = blue_red(img);  // sin(f . d) takes both signs
    EXPECT_GT(blue, 200) << kind;
    EXPECT_GT(red, 200) << kind;
    EXPECT_THROW(write_phase_picture(*att, 3, built, {}, out_dir("phase-bad"), kind),
                 std::invalid_argument);
  }
  Rng rng(3);
  auto bias = make_attention_encoding(parse_encoding("relbias"), 2, 16, {4, 4}, 1, rng);
  EXPECT_THROW(phase_reach(*bias, {{4, 4}, 1}, {{6, 6}, 1}, "x"), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
