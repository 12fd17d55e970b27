// `vitpe bench attention --device cuda [--batch 64] [--swin-images 64] [--reps 20] [--json F]`:
// times the fused CUDA attention on ViT-B/16 shapes (B x 12 heads, N = 197, hd 64, class token)
// and Swin-T stage-1 shapes (64 windows of 7x7 per 224 image, 3 heads, hd 32, shifted), each
// with the encoding read inside the kernel and with the FasterTransformer-style baseline (the
// same terms expanded into a dense [H, N, N] bias and [nW, N, N] mask read from memory).
// Prints milliseconds per call and TFLOP/s (4 B H N^2 hd flops); --json writes the rows for
// tests/cuda/torch_attention_bench.py, which sets PyTorch's SDPA beside them.
// Without a CUDA build or device it exits with a message that says so.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/command.h"
#include "encodings/encoding.h"
#include "ops/device_memory.h"
#include "ops/files.h"
#include "ops/random.h"
#ifdef VITPE_WITH_CUDA
#include "ops/attention_terms.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace vitpe::app {
namespace {

struct AttnBenchOptions {
  std::string device = "cuda";
  int batch = 64;        // ViT images
  int swin_images = 64;  // Swin images (64 windows each)
  int reps = 20;
  std::string json;
};

#ifdef VITPE_WITH_CUDA

struct AttentionRow {
  std::string model, variant, dtype;
  int64_t B, H, N, hd;
  double ms;
  double tflops() const { return 4.0 * B * H * N * N * hd / (ms * 1e-3) / 1e12; }
};

// Mean milliseconds per call over `reps` calls, best of 3 rounds, after a warm-up call.
double time_ms(const std::function<void()>& f, int reps) {
  f();
  cuda::synchronize();
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    cuda::synchronize();
    const std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count() / reps);
  }
  return best;
}

Tensor random_device(const Shape& s, DType t, uint64_t seed) {
  Rng rng(seed);
  Tensor h = Tensor::empty(s);
  rng.fill_normal(h, 1.0);
  return t == DType::f32 ? h.to(Device::cuda) : h.to(DType::bf16).to(Device::cuda);
}

struct Qkv {
  Tensor q, k, v, out;
};
Qkv make_qkv(const Shape& s, DType t) {
  return {random_device(s, t, 1), random_device(s, t, 2), random_device(s, t, 3),
          Tensor::empty(s, t, Device::cuda)};
}

// The attention encoding of one block, from the project's own factory.
std::unique_ptr<AttentionEncoding> encoding(const std::string& spec, int64_t H, int64_t hd,
                                            Grid window, int64_t prefix) {
  Rng rng(7);
  return make_attention_encoding(parse_encoding(spec), H, hd, window, prefix, rng);
}

void bench_vit(const AttnBenchOptions& o, std::vector<AttentionRow>& rows) {
  const int64_t B = o.batch, H = 12, hd = 64, P = 1;
  const Grid win{14, 14};
  const int64_t N = P + win.count();
  const AttnGeometry geom{win, P};
  // Each encoding's terms as the kernel reads them, and relbias as a dense bias for comparison.
  auto relbias = encoding("relbias", H, hd, win, P);
  const AttentionTerms relbias_terms = relbias->terms(geom).to(Device::cuda);
  Tensor dense = Tensor::empty(Shape{H, N, N});
  relbias->bias(dense, geom);
  const Tensor dense_d = dense.to(Device::cuda);
  const AttentionTerms mixed_terms =
      encoding("rope-mixed", H, hd, win, P)->terms(geom).to(Device::cuda);
  const AttentionTerms alibi_terms =
      encoding("alibi2d", H, hd, win, P)->terms(geom).to(Device::cuda);

  for (DType t : {DType::bf16, DType::f32}) {
    Qkv x = make_qkv(Shape{B, H, N, hd}, t);
    auto run = [&](const std::string& variant, const cuda::AttentionParams& p) {
      const double ms = time_ms([&] { cuda::attention_forward(x.out, x.q, x.k, x.v, p); }, o.reps);
      rows.push_back({"vit-b16", variant, dtype_name(t), B, H, N, hd, ms});
    };
    cuda::AttentionParams base;
    base.scale = 1.f / 8.f;
    cuda::AttentionParams p = base;
    p.terms = relbias_terms;
    run("relbias (in-kernel table)", p);
    p = base;
    p.bias = dense_d;
    run("relbias (dense [H,N,N] bias)", p);
    if (t == DType::f32) continue;  // the f32 path is for accuracy; one row of each is enough
    run("none", base);
    p = base;
    p.terms = mixed_terms;
    run("rope-mixed (in-kernel)", p);
    p = base;
    p.terms = alibi_terms;
    run("alibi2d (in-kernel)", p);
  }
}

void bench_swin(const AttnBenchOptions& o, std::vector<AttentionRow>& rows) {
  const int64_t H = 3, hd = 32, R = 56, C = 56, M = 7, shift = 3;
  const int64_t nW = (R / M) * (C / M), B = o.swin_images * nW, N = M * M;
  const Grid win{M, M};
  auto relbias = encoding("relbias", H, hd, win, 0);
  const AttentionTerms terms = relbias->terms(AttnGeometry{win, 0}).to(Device::cuda);
  Tensor dense = Tensor::empty(Shape{H, N, N});
  relbias->bias(dense, AttnGeometry{win, 0});
  // The shift mask expanded on the host with the kernel's own (host-callable) function.
  AttnBiasArgs a;
  a.B = static_cast<int>(nW), a.H = 1, a.N = static_cast<int>(N);
  a.Mh = a.Mw = static_cast<int>(M);
  a.shift = true, a.shift_r = a.shift_c = static_cast<int>(shift);
  a.image_rows = static_cast<int>(R), a.image_cols = static_cast<int>(C);
  Tensor mask = Tensor::empty(Shape{nW, N, N});
  for (int w = 0; w < nW; ++w)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) mask.at((w * N + i) * N + j) = attn_bias_at(a, w, 0, i, j);
  const Tensor dense_d = dense.to(Device::cuda), mask_d = mask.to(Device::cuda);

  for (DType t : {DType::bf16, DType::f32}) {
    Qkv x = make_qkv(Shape{B, H, N, hd}, t);
    auto run = [&](const std::string& variant, const cuda::AttentionParams& p) {
      const double ms = time_ms([&] { cuda::attention_forward(x.out, x.q, x.k, x.v, p); }, o.reps);
      rows.push_back({"swin-t-stage1", variant, dtype_name(t), B, H, N, hd, ms});
    };
    cuda::AttentionParams p;
    p.scale = 1.f / std::sqrt(32.f);
    p.terms = terms;
    p.shift_r = p.shift_c = shift;
    p.image_rows = R;
    p.image_cols = C;
    run("shifted relbias (in-kernel table + mask)", p);
    cuda::AttentionParams d;
    d.scale = p.scale;
    d.bias = dense_d;
    d.mask = mask_d;
    run("shifted relbias (dense bias + mask)", d);
  }
}

void run_attention_bench(const AttnBenchOptions& o) {
  if (o.device != "cuda") {
    throw ExitError{2,
                    "bench attention: only --device cuda is benchmarked here (the CPU "
                    "attention is part of `vitpe bench --model`)"};
  }
  if (!cuda_available()) {
    throw ExitError{1,
                    "bench attention: no CUDA device found (cudaGetDeviceCount reports none "
                    "or the NVIDIA driver is missing); run it on a machine with a GPU"};
  }
  std::printf("device: %s\n", cuda::device_summary().c_str());
  std::vector<AttentionRow> rows;
  bench_vit(o, rows);
  bench_swin(o, rows);

  std::printf("\n%-14s %-42s %-5s %6s %3s %4s %4s %10s %9s\n", "shape", "variant", "dtype", "B",
              "H", "N", "hd", "ms", "TFLOP/s");
  for (const AttentionRow& r : rows) {
    std::printf("%-14s %-42s %-5s %6lld %3lld %4lld %4lld %10.4f %9.2f\n", r.model.c_str(),
                r.variant.c_str(), r.dtype.c_str(), static_cast<long long>(r.B),
                static_cast<long long>(r.H), static_cast<long long>(r.N),
                static_cast<long long>(r.hd), r.ms, r.tflops());
  }
  // In-kernel encoding vs the dense baseline (same shape and dtype, rows in pairs).
  std::printf("\nin-kernel vs dense-bias baseline (speedup = dense ms / in-kernel ms):\n");
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    const AttentionRow &a = rows[i], &b = rows[i + 1];
    if (a.model == b.model && a.dtype == b.dtype &&
        a.variant.find("in-kernel") != std::string::npos &&
        b.variant.find("dense") != std::string::npos)
      std::printf("  %-14s %-5s %.2fx\n", a.model.c_str(), a.dtype.c_str(), b.ms / a.ms);
  }
  if (!o.json.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const AttentionRow& r : rows)
      j.push_back({{"model", r.model},
                   {"variant", r.variant},
                   {"dtype", r.dtype},
                   {"B", r.B},
                   {"H", r.H},
                   {"N", r.N},
                   {"hd", r.hd},
                   {"ms", r.ms},
                   {"tflops", r.tflops()}});
    write_file_atomic(o.json, j.dump(2) + "\n");
    std::printf("\nwrote %s\n", o.json.c_str());
  }
}

#else

void run_attention_bench(const AttnBenchOptions&) {
  throw ExitError{1,
                  "bench attention: this vitpe was built without CUDA (configure with "
                  "-DVITPE_CUDA=ON and the CUDA Toolkit, on a machine with an NVIDIA GPU)"};
}

#endif

void add_bench_attention(CLI::App& root) {
  CLI::App* bench = find_or_add_subcommand(
      root, "bench", "Benchmarks: a whole model (--model), or a subcommand (ops, attention)");
  bench->require_subcommand(0, 1);
  auto o = std::make_shared<AttnBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "attention",
      "Fused CUDA attention on ViT-B/16 and Swin-T shapes, in-kernel encodings vs "
      "a dense bias");
  cmd->add_option("--device", o->device, "cuda (the only device benchmarked here)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--batch", o->batch, "ViT-B/16 images (default 64)")->check(CLI::PositiveNumber);
  cmd->add_option("--swin-images", o->swin_images, "Swin-T images of 64 windows (default 64)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--reps", o->reps, "Timed calls per round, best of 3 rounds (default 20)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", o->json, "Also write the rows as JSON to this file");
  cmd->callback([o] { run_attention_bench(*o); });
}

VITPE_COMMAND(61, "bench", computes, add_bench_attention);

}  // namespace
}  // namespace vitpe::app
