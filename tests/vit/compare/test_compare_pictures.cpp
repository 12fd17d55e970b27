// The report's encoding pictures: the token part's position similarity and
// block 0's attention terms drawn again at every other evaluation size under both extension
// policies, every block's own attention part and, for rotation kinds, its phase picture, each
// captioned with what it shows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/tiny_vit.h"
#include "vit/compare/compare_pictures.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny(const std::string& encoding) {
  return testing::tiny_vit_config(encoding, 16, 1, 2, 3);
}

std::vector<std::string> captions(const std::string& encoding) {
  const fs::path dir = fs::temp_directory_path() / ("vitpe_pics_" + std::to_string(::getpid()));
  std::vector<std::string> out;
  for (const Picture& p : encoding_pictures(tiny(encoding), nullptr, dir.string(), {16, 24})) {
    EXPECT_GT(p.png.size(), 100u) << p.caption;
    out.push_back(p.caption);
  }
  fs::remove_all(dir);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x == s) return true;
  return false;
}

TEST(ComparePictures, OtherSizesUnderBothPoliciesAndEveryBlock) {
  const auto c = captions("learned1d+relbias");
  EXPECT_EQ(c.size(), 8u);
  EXPECT_TRUE(has(c, "learned1d_values"));
  EXPECT_TRUE(has(c, "learned1d_similarity"));
  EXPECT_TRUE(has(c, "24 px (6x6), interpolate: learned1d_similarity"));
  EXPECT_TRUE(has(c, "24 px (6x6), extrapolate: learned1d_similarity"));
  EXPECT_TRUE(has(c, "block 0: relbias_attention"));
  EXPECT_TRUE(has(c, "block 1: relbias_attention"));
  EXPECT_TRUE(has(c, "block 0 at 24 px (6x6), interpolate: relbias_attention"));
  EXPECT_TRUE(has(c, "block 0 at 24 px (6x6), extrapolate: relbias_attention"));
  // A fixed kind draws one block (they are all the same); a kind without grid-dependent
  // numbers (none, peg) nothing at other sizes.
  const auto r = captions("rope-axial");
  EXPECT_EQ(r.size(), 4u);
  EXPECT_TRUE(has(r, "block 0: rope-axial_phase"));
  EXPECT_TRUE(has(r, "block 0 at 24 px (6x6), interpolate: rope-axial_attention")) << r[2];
  EXPECT_TRUE(captions("none").empty());
}

}  // namespace
}  // namespace vitpe
