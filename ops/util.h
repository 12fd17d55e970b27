// Small helpers every layer uses, written once: splitting, joining and trimming text, escaping
// bytes that are not UTF-8, and a monotonic clock for rates and durations.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vitpe {

// "a,b,,c" -> {"a", "b", "", "c"}: every separator splits, empty pieces are kept.
std::vector<std::string> split(const std::string& text, char sep);
// parts[from..] joined with sep.
std::string join(const std::vector<std::string>& parts, const std::string& sep, size_t from = 0);
// Without leading and trailing spaces and tabs.
std::string trim(const std::string& text);
bool starts_with(const std::string& s, const std::string& prefix);
bool ends_with(const std::string& s, const std::string& suffix);
// Digits only, at least one ("12"; not "", "-1", "1e3").
bool is_digits(const std::string& s);

// text with every byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no overlong
// forms, surrogates or code points past U+10FFFF) written as the four characters \xHH (lower-case
// hex), as Python's "backslashreplace" does; valid UTF-8 is returned unchanged. For names that
// come from the file system (folder and file names are bytes) on their way into JSON or a
// report, which must be UTF-8.
std::string utf8_escaped(std::string_view text);

// Seconds on a monotonic clock (differences are durations; the origin means nothing).
double monotonic_seconds();

}  // namespace vitpe
