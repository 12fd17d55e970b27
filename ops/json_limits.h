// The one JSON reader for text vitpe did not write itself (safetensors headers, timm's
// config.json, the model config stored in a checkpoint): nlohmann's SAX parser, which is
// iterative and linear in the text, with every limit checked as the value arrives, so a hostile
// document is refused after reading about as much of it as the limit allows, never after
// building it (a 90 MB array of 45 M ones once took 2 GB before a check saw it; a depth check
// that rescanned each parent at every object end made 100k entries take minutes).
//
// Refused while parsing, each with a message naming the limit and the path of keys to the value
// ('w'.'shape'[3]): nesting deeper than max_depth, an object with more than max_members
// members, an array with more than max_elements elements, a key longer than max_key_bytes, more
// than max_values values held at once, and a key that appears twice in one object (nlohmann
// would keep the last one silently). Invalid JSON (including strings that are not UTF-8) is refused
// with nlohmann's message ("not valid JSON: ..."), which says the byte where it stopped.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace vitpe {

struct JsonLimits {
  int max_depth = 16;              // arrays and objects inside each other (the root is 1)
  int64_t max_members = 1 << 16;   // members of one object
  int64_t max_elements = 1 << 16;  // elements of one array
  int64_t max_key_bytes = 1024;    // one key
  // Values held at once, containers included: the whole document, or with parse_json_members
  // one member of the root. With the limits above this bounds the memory a document takes.
  int64_t max_values = int64_t{1} << 20;
};

// The document in `text`. Throws std::runtime_error (no file name: the caller adds where the
// text came from).
nlohmann::json parse_json_limited(std::string_view text, const JsonLimits& limits);

// The same, for a document whose root object may be large (a safetensors header): each member
// of the root object is handed to `member(key, value)` as soon as it ends and is then dropped,
// so memory holds one member at a time. Returns the root when it is not an object (for the
// caller's "expected an object, found ..."), otherwise an empty object. Duplicate keys of the
// root are refused as at any other level. Exceptions thrown by `member` propagate.
using JsonMemberFn = std::function<void(const std::string& key, nlohmann::json& value)>;
nlohmann::json parse_json_members(std::string_view text, const JsonLimits& limits,
                                  const JsonMemberFn& member);

}  // namespace vitpe
