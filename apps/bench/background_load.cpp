#include "apps/bench/background_load.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>

namespace vitpe::app {

BackgroundLoad::BackgroundLoad(int n, const std::string& command) {
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      stop();
      throw std::runtime_error(command + ": --background-load: fork failed after " +
                               std::to_string(i) + " processes");
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
    children_.push_back(pid);
  }
}

void BackgroundLoad::stop() {
  for (pid_t pid : children_) kill(pid, SIGKILL);
  for (pid_t pid : children_) waitpid(pid, nullptr, 0);
  children_.clear();
}

}  // namespace vitpe::app
