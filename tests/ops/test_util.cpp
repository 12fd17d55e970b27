// split / join / trim against hand-worked cases (empty pieces kept, join from an offset) and the
// monotonic clock moving forward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/util.h"

namespace vitpe {
namespace {

using Strings = std::vector<std::string>;

TEST(Util, SplitKeepsEmptyPieces) {
  EXPECT_EQ(split("a,b,,c", ','), (Strings{"a", "b", "", "c"}));
  EXPECT_EQ(split("", ','), (Strings{""}));
  EXPECT_EQ(split("x.", '.'), (Strings{"x", ""}));
  EXPECT_EQ(split("layers.0.blocks.1", '.'), (Strings{"layers", "0", "blocks", "1"}));
}

TEST(Util, JoinFromAnOffset) {
  const Strings p{"features", "1", "0", "attn"};
  EXPECT_EQ(join(p, "."), "features.1.0.attn");
  EXPECT_EQ(join(p, ".", 2), "0.attn");
  EXPECT_EQ(join(p, ".", 4), "");
  EXPECT_EQ(join({}, ","), "");
  EXPECT_EQ(join(split("a,b,c", ','), ","), "a,b,c");
}

TEST(Util, TrimSpacesAndTabs) {
  EXPECT_EQ(trim("  a b\t"), "a b");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("x"), "x");
}

TEST(Util, MonotonicSecondsMoveForward) {
  const double a = monotonic_seconds();
  const double b = monotonic_seconds();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace vitpe
