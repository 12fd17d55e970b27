// Runs a PyTorch peer script of the benchmarks (scripts/torch_*_peer.py) and hands each JSON
// line it prints to the caller. Peers are optional: when one cannot run, the benchmark says why
// and goes on without ratios.
#pragma once

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace vitpe::app {

// Runs `cmd` (stderr folded into stdout), calls on_json for every line that parses as JSON and
// whose fields on_json can read (it throws otherwise). Returns true when the command exited 0 and
// at least one line was taken; otherwise prints the other lines and returns false.
inline bool run_json_peer(const std::string& cmd,
                          const std::function<void(const nlohmann::json&)>& on_json) {
  std::fprintf(stderr, "running the PyTorch peer: %s\n", cmd.c_str());
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    std::fprintf(stderr, "could not start the PyTorch peer\n");
    return false;
  }
  char buf[4096];
  std::string log;
  int taken = 0;
  while (std::fgets(buf, sizeof buf, pipe)) {
    const std::string line(buf);
    try {
      on_json(nlohmann::json::parse(line));
      ++taken;
    } catch (const std::exception&) {
      log += line;
    }
  }
  if (pclose(pipe) != 0 || taken == 0) {
    std::fprintf(stderr, "the PyTorch peer did not run (is python3-torch installed?):\n%s\n",
                 log.c_str());
    return false;
  }
  return true;
}

}  // namespace vitpe::app
