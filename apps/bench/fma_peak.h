// The machine's FMA peak: loops of fused multiply-adds on registers only (12 independent
// accumulators, more than FMA latency x ports on current x86 cores; nothing loaded or stored),
// the most floating-point work the cores can do, against which bench reads every op's rate.
#pragma once

#include <string>

namespace vitpe::app {

struct FmaPeak {
  int threads = 1;
  double avx2_1 = 0, avx2_all = 0;      // GFLOP/s on 1 thread and on `threads`; 0: no AVX2 FMA
  double avx512_1 = 0, avx512_all = 0;  // 0 where the CPU has no AVX-512
  bool onednn_avx512 = false;           // oneDNN dispatches avx512 kernels here
  // The peak of the vector width oneDNN runs, on all threads (0 when not measured).
  double for_onednn() const { return onednn_avx512 ? avx512_all : avx2_all; }
  // "FMA peak (register-only loop): AVX2 ... GFLOP/s on 1 thread, ... on N[; AVX-512 ...]"
  std::string describe() const;
};

// Best of 9 runs of about 0.05 s per width and thread count (about 2 s in all).
FmaPeak measure_fma_peak(int threads);

}  // namespace vitpe::app
