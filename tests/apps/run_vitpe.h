// Running the built `vitpe` command from a test: its exit code and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace vitpe::testing {

struct CmdResult {
  int code;
  std::string out;  // stdout, and stderr unless `err` drops it
};

// `vitpe ARGS`; stderr is kept when `err` is "2>&1", dropped for "2>/dev/null".
inline CmdResult vitpe(const std::string& args, const std::string& err = "2>&1") {
  const std::string cmd = std::string(VITPE_BINARY_DIR) + "/vitpe " + args + " " + err;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The stdout of `vitpe ARGS` (stderr dropped) as JSON; the exit status must be 0.
inline nlohmann::json json_of(const std::string& args) {
  const std::string cmd = std::string(VITPE_BINARY_DIR) + "/vitpe " + args + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (pipe && std::fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  const int status = pipe ? pclose(pipe) : -1;
  EXPECT_EQ(status, 0) << args << "\n" << out;
  return nlohmann::json::parse(out);  // throws (fails the test) on anything but JSON
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace vitpe::testing
