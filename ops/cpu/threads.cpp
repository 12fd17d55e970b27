// Thread count of the CPU ops: OpenMP's count of the calling thread. oneDNN in Debian is built on
// the OpenMP runtime and our thread pool (ops/parallel.h) sizes its jobs by the same count, so
// setting it here sets both (inside a pool chunk it is 1: oneDNN then runs on that thread).
#include <omp.h>

#include "ops/ops.h"

namespace vitpe {

void set_num_threads(int n) {
  // 0 keeps OMP_NUM_THREADS (or OpenMP's default: all cores).
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace vitpe
