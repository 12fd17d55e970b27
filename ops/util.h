// Small helpers every layer uses, written once: splitting, joining and trimming text, making
// text from outside (file names, class names) safe to write as JSON or to a terminal, and a
// monotonic clock for rates and durations.
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


// Whether `text` is valid UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF), the test JSON writers apply.
bool is_utf8(std::string_view text);
// `text` with each byte that is not part of valid UTF-8 written as \xNN (a Latin-1 file name
// "caf\xe9.png"), so it can be written as JSON; valid text comes back unchanged.
std::string utf8_safe(std::string_view text);
// utf8_safe, and control characters written as \xNN (C0 and DEL: "\x1b" for ESC) or \uNNNN
// (C1: "\u009b"), so text from outside cannot move a terminal's cursor, change its colours or
// break a line of output.
std::string printable(std::string_view text);
// `text` as one CSV field (RFC 4180): quoted, with its quotes doubled, when it holds a comma, a
// quote or a line break; unchanged otherwise. Text from outside goes through utf8_safe first.
std::string csv_field(std::string_view text);
// printable, line by line: the line breaks of a message of several lines are kept.
std::string printable_lines(std::string_view text);

// Seconds on a monotonic clock (differences are durations; the origin means nothing).
double monotonic_seconds();

}  // namespace vitpe
