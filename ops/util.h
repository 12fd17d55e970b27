// Small helpers every layer uses, written once: splitting, joining and trimming text, and a
// monotonic clock for rates and durations.
#pragma once

#include <cstddef>
#include <string>
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

// Seconds on a monotonic clock (differences are durations; the origin means nothing).
double monotonic_seconds();

}  // namespace vitpe
