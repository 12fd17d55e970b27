// split / join / trim against hand-worked cases (empty pieces kept, join from an offset),
// utf8_escaped against hand-worked cases and nlohmann::json's own UTF-8 check, and the monotonic
// clock moving forward.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
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

TEST(Util, Utf8EscapedKeepsValidTextAndEscapesEveryOtherByte) {
  EXPECT_EQ(utf8_escaped(""), "");
  EXPECT_EQ(utf8_escaped("plain ascii"), "plain ascii");
  EXPECT_EQ(utf8_escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x88"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x88");  // U+00E9, U+20AC, U+1F408 stay
  EXPECT_EQ(utf8_escaped("caf\xe9"), "caf\\xe9");          // Latin-1: one lone byte
  EXPECT_EQ(utf8_escaped("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(utf8_escaped("\xe2\x82"), "\\xe2\\x82");                        // a sequence cut short
  EXPECT_EQ(utf8_escaped("\xc0\xaf"), "\\xc0\\xaf");                        // overlong '/'
  EXPECT_EQ(utf8_escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80");               // a surrogate
  EXPECT_EQ(utf8_escaped("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");      // past U+10FFFF
  EXPECT_EQ(utf8_escaped(std::string("a\0b", 3)), std::string("a\0b", 3));  // NUL is UTF-8
  // Every string of one or two bytes and of three bytes from the interesting lead and
  // continuation values: unchanged exactly when nlohmann::json can write it, and always
  // writable after escaping.
  std::vector<std::string> inputs;
  for (int a = 0; a < 256; ++a) {
    inputs.push_back(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) inputs.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  const int edges[] = {0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2,
                       0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf4, 0xf5, 0xff};
  for (int a : edges)
    for (int b : edges)
      for (int c : edges)
        for (int d : edges)
          inputs.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c),
                            static_cast<char>(d)});
  for (const std::string& in : inputs) {
    bool writable = true;
    try {
      (void)nlohmann::json(in).dump();
    } catch (const nlohmann::json::type_error&) {
      writable = false;
    }
    const std::string out = utf8_escaped(in);
    EXPECT_EQ(out == in, writable) << nlohmann::json(out).dump();
    EXPECT_NO_THROW((void)nlohmann::json(out).dump()) << out;
  }
}

TEST(Util, MonotonicSecondsMoveForward) {
  const double a = monotonic_seconds();
  const double b = monotonic_seconds();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace vitpe
