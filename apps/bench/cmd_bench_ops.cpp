// `vitpe bench ops [--threads N] [--reps R]`: speed of the CPU ops that dominate a ViT-S/16
// forward pass (its four linear layers, in f32 and in int8, and attention at batch 1 and 8), as
// median time, GFLOP/s and the fractions of two peaks measured first in the same run: oneDNN's
// f32 matmul on a large plain product (2048 x 2048 x 2048), and the FMA peak, a register-only loop
// of fused multiply-adds (the most arithmetic the cores can do at all). Numbers, not a test: the
// targets at 2 threads are >= 80% of the matmul peak for the linears at batch 8 and >= 50% for
// attention.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench/fma_peak.h"
#include "apps/bench/measure.h"
#include "apps/command.h"
#include "ops/cpu/attention_tiles.h"
#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "ops/random.h"

namespace vitpe::app {
namespace {

struct BenchOpsOptions {
  int reps = 20;
};

// Seconds per call of f: median of `reps` timed calls after two warm-up calls, and the best.
// cpu_use = CPU time of the process / (wall time x threads) over the timed calls: well below 1
// means other processes took the cores (or threads idled), and the rates understate the ops.
struct OpTiming {
  double median, best, cpu_use;
};
OpTiming time_calls(const std::function<void()>& f, int reps) {
  f();
  f();
  std::vector<double> t;
  t.reserve(static_cast<size_t>(reps));
  const double cpu0 = process_cpu_seconds();
  double wall = 0;
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    wall += t.back();
  }
  const double cpu_use = (process_cpu_seconds() - cpu0) / (wall * num_threads());
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), cpu_use};
}

Tensor random(const Shape& s, uint64_t seed, double std = 1.0) {
  Rng rng(seed);
  Tensor t = Tensor::empty(s);
  rng.fill_normal(t, std);
  return t;
}

struct OpRow {
  std::string op, shape;
  int batch;
  double ms, gflops, cpu_use;
  std::string kernels;  // what ran: oneDNN's implementations, its sgemm, our own kernels' ISA
};

// The ISA of vitpe's own kernels (softmax, GELU, layernorm, attention's row work, int8
// quantisation): AVX2 + FMA where the CPU has it, else the x86-64-v2 baseline (SSE4.2).
// The ISA of vitpe's own kernels in a row: AVX2 (int8's quantisation), or AVX-512 where the
// op has such kernels (attention's softmax rows).
std::string own_isa(bool has_avx512 = false) {
  if (has_avx512 && cpu::cpu_has_avx512()) return "own:avx512";
  return cpu::cpu_has_avx2_fma() ? "own:avx2" : "own:sse4.2";
}

// The oneDNN implementations a call of f runs (recorded over one call), joined by '+', with
// `extra` after them.
std::string kernels_of(const std::function<void()>& f, const std::string& extra = "") {
  cpu::start_kernel_record();
  f();
  std::string s;
  for (const std::string& k : cpu::recorded_kernels()) s += (s.empty() ? "" : "+") + k;
  if (!extra.empty()) s += (s.empty() ? "" : "+") + extra;
  return s;
}

void run_bench_ops(const BenchOpsOptions& o) {
  const int reps = std::max(1, o.reps);
  std::printf("vitpe bench ops: %d threads, oneDNN ISA %s, %d timed calls per row (median)\n\n",
              num_threads(), cpu_isa_name(), reps);

  // ---- peak: the best rate of a large plain f32 matmul -----------------------------------------
  const int64_t p = 2048;
  Tensor pa = random(Shape{p, p}, 1), pb = random(Shape{p, p}, 2), pc = Tensor::empty(Shape{p, p});
  const cpu::MatmulSpec big{.batch = 1, .m = p, .n = p, .k = p};
  OpTiming peak_t =
      time_calls([&] { cpu::matmul(big, pa.f32(), pb.f32(), pc.f32()); }, std::max(3, reps / 4));
  const double peak = 2.0 * p * p * p / peak_t.best / 1e9;
  std::printf("peak: plain f32 matmul %lldx%lldx%lld, best of %d: %.1f GFLOP/s\n",
              static_cast<long long>(p), static_cast<long long>(p), static_cast<long long>(p),
              std::max(3, reps / 4), peak);
  const FmaPeak fma_peak = measure_fma_peak(num_threads());
  std::printf("%s\n", fma_peak.describe().c_str());
  const double fma = fma_peak.for_onednn();
  if (fma > 0) {
    std::printf("the matmul peak is %.0f%% of the %s FMA peak, which the column 'of FMA' uses\n",
                100.0 * peak / fma, fma_peak.onednn_avx512 ? "AVX-512" : "AVX2");
  }
  std::printf("\n");

  // ---- ViT-S/16 rows: D = 384, 6 heads of 64, N = 197 tokens ------------------------------------
  const int64_t d = 384, n = 197, heads = 6, hd = 64;
  std::vector<OpRow> rows;
  for (int batch : {1, 8}) {
    const int64_t m = n * batch;
    struct Linear {
      const char* name;
      int64_t k, n;
      Act act;
      bool residual;
    };
    for (const Linear& l :
         {Linear{"qkv", d, 3 * d, Act::none, false}, Linear{"proj", d, d, Act::none, false},
          Linear{"fc1+gelu", d, 4 * d, Act::gelu, false},
          Linear{"fc2+residual", 4 * d, d, Act::none, true}}) {
      Tensor x = random(Shape{batch, n, l.k}, 3);
      Tensor w = random(Shape{l.n, l.k}, 4, 0.02);
      Tensor b = random(Shape{l.n}, 5, 0.02);
      Tensor r = l.residual ? random(Shape{batch, n, l.n}, 6) : Tensor();
      Tensor y = Tensor::empty(Shape{batch, n, l.n});
      const std::string shape =
          std::to_string(m) + "x" + std::to_string(l.k) + " -> " + std::to_string(l.n);
      const double flops = 2.0 * m * l.k * l.n;
      const auto f32 = [&] { linear_forward(y, x, w, b, l.act, r); };
      OpTiming t = time_calls(f32, reps);
      rows.push_back({l.name, shape, batch, t.median * 1e3, flops / t.median / 1e9, t.cpu_use,
                      kernels_of(f32)});
      // The same layer in int8 (quantising x, the u8 x s8 product, the epilogue): its GFLOP/s
      // count the same multiply-adds, so the column compares the two directly.
      const Int8Weights q = quantize_weights_int8(w);
      const auto int8 = [&] { linear_int8_forward(y, x, q, b, l.act, r); };
      t = time_calls(int8, reps);
      rows.push_back({std::string(l.name) + " int8", shape, batch, t.median * 1e3,
                      flops / t.median / 1e9, t.cpu_use, kernels_of(int8, own_isa())});
    }
    // attention: softmax(q k^T / sqrt(hd)) v on B*6 heads; FLOPs of the two matmuls.
    Tensor q = random(Shape{batch, heads, n, hd}, 7), k = random(Shape{batch, heads, n, hd}, 8);
    Tensor v = random(Shape{batch, heads, n, hd}, 9), out = Tensor::empty(q.shape()), probs;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const auto attend = [&] { attention_forward(out, probs, q, k, v, scale); };
    OpTiming t = time_calls(attend, reps);
    const double flops = 4.0 * batch * heads * n * n * hd;
    rows.push_back(
        {"attention",
         std::to_string(batch * heads) + "x" + std::to_string(n) + "x" + std::to_string(hd), batch,
         t.median * 1e3, flops / t.median / 1e9, t.cpu_use,
         kernels_of(attend, cpu::attention_tiles_take(hd)
                                ? std::string("own:avx512")
                                : std::string("sgemm:") + cpu_isa_name() + "+" + own_isa(true))});
  }

  std::printf("%-17s %5s  %-20s %10s %10s %8s %8s %8s  %s\n", "op", "batch", "shape", "ms",
              "GFLOP/s", "of peak", "of FMA", "cpu use", "kernels");
  std::printf("%s\n", std::string(120, '-').c_str());
  double min_use = peak_t.cpu_use;
  for (const OpRow& r : rows) {
    const std::string of_fma =
        fma > 0 ? fmt::format("{:.0f}%", 100.0 * r.gflops / fma) : std::string("-");
    std::printf("%-17s %5d  %-20s %10.3f %10.1f %7.0f%% %8s %7.0f%%  %s\n", r.op.c_str(), r.batch,
                r.shape.c_str(), r.ms, r.gflops, 100.0 * r.gflops / peak, of_fma.c_str(),
                100.0 * r.cpu_use, r.kernels.c_str());
    min_use = std::min(min_use, r.cpu_use);
  }
  std::printf(
      "\nkernels: oneDNN's implementation of each primitive (its impl_info_str: family and "
      "ISA), sgemm: oneDNN's sgemm on the ISA it dispatches to, own: vitpe's kernels "
      "(AVX-512, AVX2 + FMA, or the SSE4.2 baseline; attention on AVX-512 is all vitpe's own: "
      "register tiles for both products and the softmax)\n");
  std::printf("\ncpu use: process CPU time / (wall time x %d threads); the peak run had %.0f%%.\n",
              num_threads(), 100.0 * peak_t.cpu_use);
  if (min_use < 0.85) {
    std::printf(
        "note: cpu use below 85%% means other processes shared the cores (or threads "
        "idled): the rates understate this machine.\n");
  }
}

void add_bench_ops(CLI::App& root) {
  CLI::App* bench = find_or_add_subcommand(
      root, "bench", "Benchmarks: a whole model (--model), or a subcommand (ops, attention)");
  bench->require_subcommand(0, 1);
  auto o = std::make_shared<BenchOpsOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "ops",
      "CPU linear layers and attention of ViT-S/16 (batch 1 and 8) against the oneDNN "
      "f32 matmul peak and the FMA peak (a register-only loop)");
  add_threads_option(cmd);
  cmd->add_option("--reps", o->reps, "Timed calls per row; the median is reported (default 20)")
      ->check(CLI::PositiveNumber);
  cmd->callback([o] { run_bench_ops(*o); });
}

VITPE_COMMAND(62, "bench", computes, add_bench_ops);

}  // namespace
}  // namespace vitpe::app
