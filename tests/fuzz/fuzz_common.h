// Shared parts of the libFuzzer harnesses (tests/fuzz, docs/HARDENING.md).
//
// Each harness hands the fuzzer's bytes to one of vitpe's readers the way a user's file reaches
// it: written to a file, then opened by path (the readers map or stream files; none takes a
// buffer). An error the reader throws with a message is the expected answer to a bad input;
// anything else is a finding and stops the fuzzer: a sanitizer report, a crash, an exception
// without a message, running out of memory (std::bad_alloc, or libFuzzer's -rss_limit_mb /
// -malloc_limit_mb), or a std::length_error (a size computed from the input and never checked).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "ops/ops.h"

namespace vitpe::fuzz {

// A file of this process that each input overwrites; removed at exit.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/vitpe-fuzz-" +
            std::to_string(::getpid()) + suffix;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with data[0, size); aborts if the file cannot be written (a
  // harness that fuzzes nothing must not look like a clean run).
  const std::string& write(const uint8_t* data, size_t size) const {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "fuzz: cannot write the scratch file %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

[[noreturn]] inline void finding(const char* what, const char* message) {
  std::fprintf(stderr, "fuzz finding: %s: %s\n", what, message);
  std::abort();
}

// Runs body(); an exception with a message is a clean rejection, anything listed above a
// finding.
template <class F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const std::bad_alloc& e) {
    finding("std::bad_alloc (memory not bounded by the input's checks)", e.what());
  } catch (const std::length_error& e) {
    finding("std::length_error (a size from the input was never checked)", e.what());
  } catch (const std::exception& e) {
    if (e.what() == nullptr || e.what()[0] == '\0') finding("an exception", "with no message");
  }
}

// Keeps values computed only to touch memory from being optimised away.
inline void keep(size_t value) {
  static volatile size_t sink = 0;
  sink = sink + value;
}

// One thread: the fuzzer's own process is the unit of parallelism (-jobs / -workers).
inline int init_single_thread() {
  set_num_threads(1);
  return 0;
}

}  // namespace vitpe::fuzz
