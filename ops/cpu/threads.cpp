// Thread count of the CPU ops. oneDNN in Debian is built on the OpenMP runtime, so our own
// `#pragma omp` loops and oneDNN's kernels share one pool: setting it here sets both.
#include <omp.h>

#include "ops/ops.h"

namespace vitpe {

void set_num_threads(int n) {
  // 0 keeps OMP_NUM_THREADS (or OpenMP's default: all cores).
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace vitpe
