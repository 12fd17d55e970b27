// split / join / trim against hand-worked cases (empty pieces kept, join from an offset), the
// UTF-8 check and escapes against nlohmann's JSON writer, and the monotonic clock moving forward.
#include <gtest/gtest.h>

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

// is_utf8 against the reference every JSON output goes through (nlohmann's dump, which throws
// on invalid UTF-8): every string of one and two bytes, and random strings of up to six bytes
// drawn from bytes that matter (ASCII, continuation bytes, every lead byte).
bool nlohmann_accepts(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

TEST(Util, Utf8CheckAgreesWithTheJsonWriter) {
  std::vector<std::string> cases;
  for (int a = 0; a < 256; ++a) {
    cases.push_back(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) cases.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  const std::vector<unsigned char> alphabet = {0x41, 0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                               0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED,
                                               0xEE, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
  uint64_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int n = 1 + static_cast<int>((state >> 60) % 6);
    for (int k = 0; k < n; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      s += static_cast<char>(alphabet[(state >> 33) % alphabet.size()]);
    }
    cases.push_back(s);
  }
  int valid = 0;
  for (const std::string& s : cases) {
    ASSERT_EQ(is_utf8(s), nlohmann_accepts(s)) << ::testing::PrintToString(s);
    valid += is_utf8(s);
    // Whatever the input, the escaped text is accepted, and valid text is left alone.
    const std::string safe = utf8_safe(s);
    ASSERT_TRUE(nlohmann_accepts(safe)) << ::testing::PrintToString(s);
    if (is_utf8(s)) {
      ASSERT_EQ(safe, s);
    }
    ASSERT_TRUE(nlohmann_accepts(printable(s))) << ::testing::PrintToString(s);
  }
  EXPECT_GT(valid, 1000);  // both kinds were checked
}

TEST(Util, EscapesNameTheOffendingBytes) {
  EXPECT_EQ(utf8_safe("caf\xe9.png"), "caf\\xe9.png");
  EXPECT_EQ(utf8_safe("caf\xc3\xa9.png"), "caf\xc3\xa9.png");  // é stays
  EXPECT_EQ(utf8_safe("\xed\xa0\x80"), "\\xed\\xa0\\x80");     // a surrogate, byte by byte
  EXPECT_EQ(utf8_safe("tab\there"), "tab\there");              // valid: not escaped in JSON
  EXPECT_EQ(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(printable("a\nb\tc\x7f"), "a\\x0ab\\x09c\\x7f");
  EXPECT_EQ(printable("\xc2\x9b"
                      "2J"),
            "\\u009b2J");  // C1 CSI
  EXPECT_EQ(printable("\xc2\xa0 caf\xc3\xa9 \xe2\x82\xac"), "\xc2\xa0 caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(printable("caf\xe9"), "caf\\xe9");
  EXPECT_EQ(printable_lines("missing (2):\n  a\x1b\n  b"), "missing (2):\n  a\\x1b\n  b");
  EXPECT_EQ(printable_lines("\n"), "\n");
}

TEST(Util, CsvFieldQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(csv_field("plain name.png"), "plain name.png");
  EXPECT_EQ(csv_field(""), "");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("cr\r"), "\"cr\r\"");
}

TEST(Util, MonotonicSecondsMoveForward) {
  const double a = monotonic_seconds();
  const double b = monotonic_seconds();
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace vitpe
