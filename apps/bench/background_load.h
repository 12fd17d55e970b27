// `--background-load N` of the bench commands: N busy processes beside a measurement, for the
// shared machine a user's application runs on.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace vitpe::app {

// N busy child processes for the lifetime of the object: each spins until killed (and dies with
// this process: PR_SET_PDEATHSIG). The children run only async-signal-safe code after fork.
// `command` names the caller in the error thrown when a fork fails ("bench", "bench train").
class BackgroundLoad {
 public:
  BackgroundLoad(int n, const std::string& command);
  ~BackgroundLoad() { stop(); }
  const std::vector<pid_t>& pids() const { return children_; }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

 private:
  void stop();
  std::vector<pid_t> children_;
};

}  // namespace vitpe::app
