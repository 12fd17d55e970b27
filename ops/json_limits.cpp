// The bounded JSON reader (ops/json_limits.h): a SAX handler that builds the document as
// nlohmann's own DOM parser does (a stack of the open containers), counting as it goes.
#include "ops/json_limits.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace vitpe {

namespace {

using nlohmann::json;

// A key as messages show it: quoted, at most 60 bytes (cut at a character boundary).
// (Built by appending: GCC 12 warns falsely on "'" + std::string&&.)
std::string quote_key(const std::string& key) {
  constexpr size_t kShown = 60;
  size_t cut = std::min(key.size(), kShown);
  while (cut < key.size() && cut > 0 && (static_cast<unsigned char>(key[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  std::string out = "'";
  out.append(key, 0, cut);
  out += cut < key.size() ? "...'" : "'";
  return out;
}

class LimitedDom {
 public:
  LimitedDom(const JsonLimits& limits, const JsonMemberFn* member)
      : limits_(limits), member_(member) {}

  json take_root() { return std::move(root_); }

  // ---- nlohmann's SAX interface --------------------------------------------------------------
  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return scalar(json(v)); }
  bool string(json::string_t& v) { return scalar(json(std::move(v))); }
  bool binary(json::binary_t&) { throw std::runtime_error("not valid JSON: a binary value"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    Level& top = stack_.back();
    if (++top.count > limits_.max_members) {
      fail("an object of more than " + std::to_string(limits_.max_members) + " members at " +
           where());
    }
    if (static_cast<int64_t>(k.size()) > limits_.max_key_bytes) {
      fail("a key of " + std::to_string(k.size()) + " bytes (at most " +
           std::to_string(limits_.max_key_bytes) + " expected) in " + where());
    }
    const bool streamed_root = member_ != nullptr && stack_.size() == 1;
    const bool seen = streamed_root ? !root_keys_.insert(k).second : top.node->contains(k);
    if (seen) fail("key " + quote_key(k) + " appears more than once in " + where());
    top.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    throw std::runtime_error(std::string("not valid JSON: ") + e.what());
  }

 private:
  struct Level {
    json* node;         // the open array or object
    int64_t count = 0;  // its members or elements so far
    std::string key;    // an object's key whose value comes next
    std::string label;  // how a path names this container: 'key' or [index]
  };

  [[noreturn]] static void fail(const std::string& what) { throw std::runtime_error(what); }

  // The path of the open containers, for messages: 'w'.'shape'[3].
  std::string where() const {
    if (stack_.size() <= 1) return "the top level";
    std::string path;
    for (size_t i = 1; i < stack_.size(); ++i) {
      const std::string& l = stack_[i].label;
      path += (i > 1 && l[0] == '\'' ? "." : "") + l;
    }
    return path;
  }

  // Counts a new value and checks its place; returns how a path names it.
  std::string admit() {
    if (++values_ > limits_.max_values) {
      fail("more than " + std::to_string(limits_.max_values) + " values at once (at " + where() +
           ")");
    }
    if (stack_.empty()) return "";
    Level& top = stack_.back();
    if (!top.node->is_array()) return quote_key(top.key);
    if (++top.count > limits_.max_elements) {
      fail("an array of more than " + std::to_string(limits_.max_elements) + " elements at " +
           where());
    }
    std::string label = "[";
    label += std::to_string(top.count - 1);
    label += ']';
    return label;
  }

  // Puts `v` where the next value goes; returns it in its place.
  json& place(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return root_;
    }
    Level& top = stack_.back();
    if (top.node->is_array()) {
      top.node->push_back(std::move(v));
      return top.node->back();
    }
    json& slot = (*top.node)[top.key];
    slot = std::move(v);
    return slot;
  }

  // A member of a streamed root is handed over as soon as it is complete, then dropped.
  void hand_over_if_root_member() {
    if (member_ == nullptr || stack_.size() != 1 || !root_.is_object()) return;
    const std::string key = std::move(stack_.back().key);
    auto it = root_.find(key);
    (*member_)(key, *it);
    root_.erase(it);
    values_ = 1;  // the root
  }

  bool scalar(json&& v) {
    admit();
    place(std::move(v));
    hand_over_if_root_member();
    return true;
  }

  bool open(json&& empty) {
    std::string label = admit();
    if (static_cast<int>(stack_.size()) + 1 > limits_.max_depth) {
      fail("the JSON nests deeper than " + std::to_string(limits_.max_depth) + " levels (at " +
           where() + ")");
    }
    json& node = place(std::move(empty));
    stack_.push_back(Level{&node, 0, "", std::move(label)});
    return true;
  }

  bool close() {
    stack_.pop_back();
    hand_over_if_root_member();
    return true;
  }

  const JsonLimits limits_;
  const JsonMemberFn* member_;  // null: keep the whole document
  json root_;
  // The open containers. A pointer stays valid while its level is open: only the innermost
  // container grows, and map nodes never move.
  std::vector<Level> stack_;
  std::set<std::string> root_keys_;  // a streamed root's keys (its members are dropped)
  int64_t values_ = 0;
};

json parse(std::string_view text, const JsonLimits& limits, const JsonMemberFn* member) {
  LimitedDom dom(limits, member);
  json::sax_parse(text.data(), text.data() + text.size(), &dom);
  return dom.take_root();
}

}  // namespace

json parse_json_limited(std::string_view text, const JsonLimits& limits) {
  return parse(text, limits, nullptr);
}

json parse_json_members(std::string_view text, const JsonLimits& limits,
                        const JsonMemberFn& member) {
  return parse(text, limits, &member);
}

}  // namespace vitpe
