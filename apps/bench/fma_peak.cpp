// The FMA peak (apps/bench/fma_peak.h): register-only loops of fused multiply-adds.
#include "apps/bench/fma_peak.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "ops/ops.h"

namespace vitpe::app {
namespace {

// The loops return the final accumulators' sum so that they cannot be dropped.
constexpr int kFmaChains = 12;

__attribute__((target("avx2,fma"), noinline)) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm256_set1_ps(1.0f + 0.01f * j);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], mul, add);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < kFmaChains; ++j) sum = _mm256_add_ps(sum, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  return lanes[0] + lanes[7];
}

__attribute__((target("avx512f"), noinline)) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm512_set1_ps(1.0f + 0.01f * j);
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], mul, add);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kFmaChains; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];  // (g++ 12 warns inside _mm512_reduce_add_ps)
  _mm512_store_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

// GFLOP/s of the loop of `lanes` floats per FMA on `threads` threads (each runs it): the best of 9
// runs of about 0.05 s, so that a run in which another process took a core for a moment does not
// set the peak.
double fma_peak(int lanes, int threads) {
  const int64_t iters = 2'000'000;
  const double flops = 2.0 * lanes * kFmaChains * static_cast<double>(iters) * threads;
  double best = 0;
  volatile float sink = 0;
  for (int run = 0; run < 9; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float r = lanes == 16 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
#pragma omp critical
      sink = sink + r;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}

}  // namespace

FmaPeak measure_fma_peak(int threads) {
  FmaPeak p;
  p.threads = threads;
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return p;
  p.avx2_1 = fma_peak(8, 1);
  p.avx2_all = threads > 1 ? fma_peak(8, threads) : p.avx2_1;
  if (__builtin_cpu_supports("avx512f")) {
    p.avx512_1 = fma_peak(16, 1);
    p.avx512_all = threads > 1 ? fma_peak(16, threads) : p.avx512_1;
    p.onednn_avx512 = std::string(cpu_isa_name()).find("avx512") != std::string::npos;
  }
  return p;
}

std::string FmaPeak::describe() const {
  if (avx2_1 <= 0) return "FMA peak: not measured (this CPU has no AVX2 FMA)";
  std::string s =
      fmt::format("FMA peak (register-only loop): AVX2 {:.1f} GFLOP/s on 1 thread, {:.1f} on {}",
                  avx2_1, avx2_all, threads);
  if (avx512_1 > 0) {
    s += fmt::format("; AVX-512 {:.1f} on 1 thread, {:.1f} on {}", avx512_1, avx512_all, threads);
  }
  return s;
}

}  // namespace vitpe::app
