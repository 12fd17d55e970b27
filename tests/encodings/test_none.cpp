// none: no part at either site, and it cannot be combined.
#include "encodings/encoding.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

TEST(None, HasNoParts) {
  Rng rng(0);
  EncodingSpec s = parse_encoding("none");
  EXPECT_EQ(make_token_encoding(s, 16, {4, 4}, 1, rng), nullptr);
  EXPECT_EQ(make_attention_encoding(s, 2, 8, {4, 4}, 1, rng), nullptr);
  EXPECT_THROW(parse_encoding("none+relbias"), std::invalid_argument);
  EXPECT_THROW(parse_encoding("none:T=3"), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
