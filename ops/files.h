// Atomic file writes, the one way vitpe writes a result file (checkpoints, metrics, reports,
// pictures): the bytes go to PATH.tmp.PID in the same folder, are flushed to disk and renamed
// over PATH, so a reader (or a crash) sees the old file or the new one, never part of one. On
// any failure the temporary file is removed, PATH is untouched, and the error names PATH and
// what failed (errno's text).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vitpe {

// One piece of the file's contents (not owned; must stay valid during the call).
struct ByteSpan {
  const void* data;
  size_t size;
};

// Writes the pieces in order as PATH's new contents.
void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& pieces);
inline void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, {ByteSpan{text.data(), text.size()}});
}

}  // namespace vitpe
