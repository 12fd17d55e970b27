// Tests of ops/json_limits: the bounded reader gives what nlohmann's own parser gives on valid
// documents, refuses each limit while parsing with a message naming the path, hands a root's
// members over one at a time, and stays linear on the documents that were once quadratic.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/json_limits.h"
#include "ops/util.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using nlohmann::json;

std::string error_of(const std::string& text, const JsonLimits& limits) {
  return testing::message_of([&] { parse_json_limited(text, limits); });
}

TEST(JsonLimits, ValidDocumentsParseAsNlohmannParsesThem) {
  const std::vector<std::string> docs = {
      R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"k":"v"}})",
      R"([1, -2, 3.5, 1e300, 18446744073709551615, true, false, null, "x\u00e9\n", [], {}])",
      R"("a string root")",
      R"(  {"nested": [[[{"deep": [1]}]]], "empty": ""}  )",
      "42",
  };
  for (const std::string& d : docs) {
    const json got = parse_json_limited(d, JsonLimits{});
    EXPECT_EQ(got, json::parse(d)) << d;
    // Types survive too (an unsigned stays unsigned: the safetensors checks rely on it).
    EXPECT_EQ(got.dump(), json::parse(d).dump()) << d;
  }
}

TEST(JsonLimits, EachLimitIsRefusedWhileParsingNamingThePath) {
  JsonLimits l;
  l.max_depth = 3;
  l.max_members = 3;
  l.max_elements = 4;
  l.max_key_bytes = 8;
  l.max_values = 20;
  // At each limit the document parses; one past it is refused, naming where.
  EXPECT_NO_THROW(parse_json_limited(R"({"a":{"b":[1]}})", l));
  std::string m = error_of(R"({"a":{"b":[[1]]}})", l);
  EXPECT_NE(m.find("nests deeper than 3 levels (at 'a'.'b')"), std::string::npos) << m;
  EXPECT_NO_THROW(parse_json_limited(R"({"a":1,"b":2,"c":3})", l));
  m = error_of(R"({"x":{"a":1,"b":2,"c":3,"d":4}})", l);
  EXPECT_NE(m.find("an object of more than 3 members at 'x'"), std::string::npos) << m;
  EXPECT_NO_THROW(parse_json_limited(R"({"w":{"shape":[1,1,1,1]}})", l));
  m = error_of(R"({"w":{"shape":[1,1,1,1,1]}})", l);
  EXPECT_NE(m.find("an array of more than 4 elements at 'w'.'shape'"), std::string::npos) << m;
  m = error_of(R"([[1],[1,1,1,1,1]])", l);
  EXPECT_NE(m.find("more than 4 elements at [1]"), std::string::npos) << m;
  m = error_of(R"({"abcdefghi":1})", l);
  EXPECT_NE(m.find("a key of 9 bytes (at most 8 expected) in the top level"), std::string::npos)
      << m;
  m = error_of(R"([[1,1,1,1],[1,1,1,1],[1,1,1,1],[1,1,1,1]])", l);  // 21 values
  EXPECT_NE(m.find("more than 20 values at once (at [3])"), std::string::npos) << m;
  m = error_of(R"({"a":{"k":1,"k":2}})", l);
  EXPECT_NE(m.find("key 'k' appears more than once in 'a'"), std::string::npos) << m;
  m = error_of(R"({"k":1,"k":2})", l);
  EXPECT_NE(m.find("key 'k' appears more than once in the top level"), std::string::npos) << m;
  // The same key in two objects is not a duplicate.
  EXPECT_NO_THROW(parse_json_limited(R"({"a":{"k":1},"b":{"k":1}})", l));
}

TEST(JsonLimits, InvalidJsonSaysWhereItStopped) {
  for (const std::string bad : {"{\"a\": ", "[1,]", "{} x", "\"\xff\"", ""}) {
    const std::string m = error_of(bad, JsonLimits{});
    EXPECT_EQ(m.rfind("not valid JSON: ", 0), 0u) << m;
    EXPECT_NE(m.find("parse error"), std::string::npos) << m;
  }
}

// Nesting far past the limit (once a stack overflow in a recursive consumer) is refused at the
// limit: the 100k levels are never built.
TEST(JsonLimits, DeepNestingIsRefusedAtTheLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(error_of(deep, JsonLimits{}).find("nests deeper than 16 levels"), std::string::npos);
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  const std::string m = error_of(objects, JsonLimits{});
  EXPECT_NE(m.find("nests deeper than 16 levels (at 'a'.'a'."), std::string::npos) << m;
}

// The documents that were quadratic (a depth callback rescanning the parent at every object end:
// 100k entries took minutes; a 3.9 MB array of empty objects over 120 s) take well under a second
// now; 10 s is the acceptance bound, far above this reader's time even on a loaded machine.
TEST(JsonLimits, LargeDocumentsParseInLinearTime) {
  std::string entries = "{";
  for (int i = 0; i < 100000; ++i) {
    entries += i ? ",\"t" : "\"t";
    entries += std::to_string(i);
    entries += "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  }
  entries += "}";
  JsonLimits l;
  l.max_members = 1 << 18;
  l.max_values = 1 << 22;
  double t0 = monotonic_seconds();
  const json j = parse_json_limited(entries, l);
  EXPECT_EQ(j.size(), 100000u);
  EXPECT_EQ(j["t99999"]["data_offsets"][1], 4);
  EXPECT_LT(monotonic_seconds() - t0, 10.0);

  std::string empties = "[";
  for (int i = 0; i < 1300000; ++i) empties += i ? ",{}" : "{}";  // 3.9 MB
  empties += "]";
  t0 = monotonic_seconds();
  const std::string m = error_of(empties, JsonLimits{});
  EXPECT_NE(m.find("an array of more than 65536 elements at the top level"), std::string::npos)
      << m;
  EXPECT_LT(monotonic_seconds() - t0, 10.0);
}

// A root's members are handed over in file order as each ends, and max_values then bounds one
// member, not the document: ten members of five values each pass a limit of 8.
TEST(JsonLimits, MembersAreHandedOverOneAtATime) {
  std::string text = "{";
  for (int i = 0; i < 10; ++i) {
    text += i ? ",\"m" : "\"m";
    text += std::to_string(i);
    text += "\":[";
    text += std::to_string(i);
    text += ",1,2,3]";
  }
  text += ",\"last\":7}";
  JsonLimits l;
  l.max_values = 8;
  std::vector<std::string> keys;
  const json rest = parse_json_members(text, l, [&](const std::string& key, json& value) {
    keys.push_back(key);
    if (key != "last") {
      EXPECT_EQ(value.size(), 4u) << key;
      EXPECT_EQ(value[0], std::stoi(key.substr(1))) << key;
    } else {
      EXPECT_EQ(value, 7);
    }
  });
  ASSERT_EQ(keys.size(), 11u);
  EXPECT_EQ(keys[0], "m0");
  EXPECT_EQ(keys[9], "m9");
  EXPECT_EQ(keys[10], "last");
  EXPECT_TRUE(rest.is_object());
  EXPECT_TRUE(rest.empty());
  EXPECT_NE(testing::message_of([&] { parse_json_limited(text, l); }).find("more than 8 values"),
            std::string::npos);
  // Duplicates of the root are still seen, though its members are gone.
  const std::string dup = testing::message_of(
      [&] { parse_json_members(R"({"a":1,"b":2,"a":3})", l, [](const std::string&, json&) {}); });
  EXPECT_NE(dup.find("key 'a' appears more than once in the top level"), std::string::npos) << dup;
  // A root that is not an object comes back whole, for the caller's message.
  const json array = parse_json_members(
      "[1,2]", l, [](const std::string&, json&) { ADD_FAILURE() << "an array has no members"; });
  EXPECT_EQ(array, json::parse("[1,2]"));
  // What the callback throws propagates unchanged.
  EXPECT_THROW(parse_json_members(R"({"a":1})", l,
                                  [](const std::string&, json&) { throw std::logic_error("x"); }),
               std::logic_error);
}

}  // namespace
}  // namespace vitpe
