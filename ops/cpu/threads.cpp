// Thread count of the CPU ops: OpenMP's count of the calling thread. oneDNN in Debian is built on
// the OpenMP runtime, so setting it here sets both; and the OpenMP spin of ops/process.h.
// FixedWorkSplit's flag is the calling thread's too.
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "ops/ops.h"
#include "ops/process.h"

namespace vitpe {

void set_num_threads(int n) {
  // 0 keeps OMP_NUM_THREADS (or OpenMP's default: all cores).
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

namespace {
// Per thread, like OpenMP's own thread count: a Classifier on one thread and a training on
// another each keep their own.
thread_local bool fixed_work_split = false;
}  // namespace

FixedWorkSplit::FixedWorkSplit() : before_(fixed_work_split) { fixed_work_split = true; }
FixedWorkSplit::~FixedWorkSplit() { fixed_work_split = before_; }
bool FixedWorkSplit::active() { return fixed_work_split; }

void restart_with_short_openmp_spin(char** argv) {
  if (const char* mark = std::getenv("VITPE_OMP_WAIT")) {  // the second start
    if (std::strcmp(mark, "set") == 0) unsetenv("GOMP_SPINCOUNT");
    unsetenv("VITPE_OMP_WAIT");
    return;
  }
  if (argv == nullptr || argv[0] == nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr ||
      std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  setenv("GOMP_SPINCOUNT", "1000", 1);
  setenv("VITPE_OMP_WAIT", "set", 1);
  execv("/proc/self/exe", argv);
  unsetenv("GOMP_SPINCOUNT");  // no second start (no /proc): libgomp's default it is
  unsetenv("VITPE_OMP_WAIT");
}

}  // namespace vitpe
