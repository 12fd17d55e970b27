// `vitpe bench --model NAME_OR_CHECKPOINT --batch 1,8 [--vs-torch] [--background-load N]`:
// inference latency, throughput, GFLOP/s and peak memory of a whole model; with --vs-torch the
// PyTorch peer (scripts/torch_peer_bench.py, eager and TorchScript-frozen) runs on the same
// threads in the same run and the ratios are printed. --background-load N runs N busy processes
// (a spinning loop each, like `yes > /dev/null`) for the whole measurement, peers included: the
// shared machine of a library's users, reproducible (issue #15).
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench_model_cuda.h"
#include "apps/command.h"
#include "apps/model_options.h"
#include "apps/peer.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "vit/io/checkpoint.h"

namespace vitpe::app {
namespace {

struct BenchOptions {
  std::string model;
  std::vector<int> batches{1, 8};
  int reps = 0;
  bool vs_torch = false;
  bool json = false;
  std::string device = "cpu";
  std::string precision = "f32";
  int background_load = 0;
};

// N busy child processes for the lifetime of the object: each spins until killed (and dies with
// this process: PR_SET_PDEATHSIG). The children run only async-signal-safe code after fork.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid < 0) {
        stop();
        throw std::runtime_error("bench: --background-load: fork failed after " +
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
  ~BackgroundLoad() { stop(); }
  const std::vector<pid_t>& pids() const { return children_; }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

 private:
  void stop() {
    for (pid_t pid : children_) kill(pid, SIGKILL);
    for (pid_t pid : children_) waitpid(pid, nullptr, 0);
    children_.clear();
  }
  std::vector<pid_t> children_;
};

// Largest |a - b| over the largest |a|: the error of low-precision logits b against f32 a.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a.f32()[i] - b.f32()[i])));
    ref = std::max(ref, static_cast<double>(std::abs(a.f32()[i])));
  }
  return diff / std::max(ref, 1e-30);
}

// Peak resident memory of this process so far (VmHWM), in MiB.
double peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

struct TorchResult {
  double eager_ms = 0, jit_ms = 0;
};

std::map<int, TorchResult> run_torch_peer(const BenchOptions& o, int threads) {
  std::string script = VITPE_SOURCE_DIR "/scripts/torch_peer_bench.py";
  if (const char* env = std::getenv("VITPE_TORCH_PEER")) script = env;
  std::string batches;
  for (int b : o.batches) batches += (batches.empty() ? "" : ",") + std::to_string(b);
  const std::string cmd = fmt::format("/usr/bin/python3 '{}' '{}' {} {} {} 2>&1", script, o.model,
                                      threads, batches, std::max(o.reps, 3));
  std::map<int, TorchResult> out;
  const bool ok = run_json_peer(cmd, [&](const nlohmann::json& j) {
    auto& r = out[j.at("batch").get<int>()];
    (j.at("mode") == "eager" ? r.eager_ms : r.jit_ms) = j.at("median_ms").get<double>();
  });
  if (!ok) out.clear();
  return out;
}

void run_bench(const BenchOptions& o) {
  if (o.device == "cuda") {
    if (o.vs_torch || o.background_load) {
      throw ExitError{2, "bench --device cuda: --vs-torch and --background-load are for the CPU"};
    }
    run_model_bench_cuda({o.model, o.batches, o.reps, o.precision, o.json});
    return;
  }
  LoadedModel loaded = load_model(o.model);
  Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  const int threads = num_threads();
  const double weights_mib = model.num_params() * 4.0 / (1 << 20);
  const Precision precision = parse_precision(o.precision);
  nlohmann::json out = {{"model", o.model},
                        {"kind", c.kind == ModelKind::vit ? "vit" : "swin"},
                        {"encoding", c.encoding},
                        {"parameters", model.num_params()},
                        {"threads", threads},
                        {"precision", o.precision},
                        {"background_load", o.background_load},
                        {"results", nlohmann::json::array()}};
  if (!o.json) {
    std::printf(
        "model %s (%s, encoding %s), %.1fM parameters (%.0f MiB f32), %d threads, %s linears\n",
        o.model.c_str(), model_family(c).c_str(), c.encoding.c_str(), model.num_params() / 1e6,
        weights_mib, threads, o.precision.c_str());
    if (o.background_load) {
      std::printf("background load: %d busy process%s beside the measurement\n", o.background_load,
                  o.background_load == 1 ? "" : "es");
    }
    std::printf("%6s %12s %10s %10s %14s\n", "batch", "median ms", "img/s", "GFLOP/s",
                "peak RSS MiB");
  }
  std::fflush(stdout);  // before fork: the children must not inherit unwritten output
  const BackgroundLoad load(o.background_load);
  out["background_pids"] = load.pids();  // gone when the command returns (a test checks)
  std::map<int, double> ours;
  Rng rng(0);
  for (int B : o.batches) {
    Tensor x = Tensor::empty({B, c.channels, c.img_rows, c.img_cols});
    rng.fill_normal(x, 1.0);
    nlohmann::json row = {{"batch", B}};
    if (precision != Precision::f32) {
      // The logits' error against f32 on this input, then the timed runs in `precision`.
      model.set_precision(Precision::f32);
      const Tensor ref = model.forward(x).clone();
      model.set_precision(precision);
      row["max_rel_logit_error"] = max_rel_diff(ref, model.forward(x));
      if (!o.json) {
        std::printf("%6d  max |logit - f32 logit| / max |f32 logit| = %.2e\n", B,
                    row["max_rel_logit_error"].get<double>());
      }
    }
    const int reps = o.reps ? o.reps : (B == 1 ? 10 : 5);
    for (int i = 0; i < 2; ++i) model.forward(x);  // warm-up: primitives, buffers
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      model.forward(x);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    ours[B] = med;
    row["median_ms"] = med;
    row["min_ms"] = ms.front();
    row["max_ms"] = ms.back();
    row["img_per_s"] = B * 1000.0 / med;
    row["gflops_per_s"] = model.flops_per_image() * B / (med * 1e6);
    row["peak_rss_mib"] = peak_rss_mib();
    out["results"].push_back(row);
    if (!o.json) {
      std::printf("%6d %12.1f %10.1f %10.1f %14.0f\n", B, med, B * 1000.0 / med,
                  model.flops_per_image() * B / (med * 1e6), peak_rss_mib());
      std::fflush(stdout);
    }
  }
  if (!o.json) {
    std::printf("memory: weights %.0f MiB; peak RSS is for the whole process so far\n",
                weights_mib);
  }
  if (o.vs_torch) {
    auto torch = run_torch_peer(o, threads);
    if (!torch.empty() && !o.json) {
      std::printf("\n%6s %12s %14s %12s %16s %14s\n", "batch", "vitpe ms", "torch eager ms",
                  "speedup", "torch jit ms", "speedup");
    }
    out["torch"] = nlohmann::json::array();
    for (int B : o.batches) {
      auto it = torch.find(B);
      if (it == torch.end()) continue;
      out["torch"].push_back(
          {{"batch", B}, {"eager_ms", it->second.eager_ms}, {"jit_ms", it->second.jit_ms}});
      if (!o.json) {
        std::printf("%6d %12.1f %14.1f %11.2fx %16.1f %13.2fx\n", B, ours[B], it->second.eager_ms,
                    it->second.eager_ms / ours[B], it->second.jit_ms, it->second.jit_ms / ours[B]);
      }
    }
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
}

void setup(CLI::App& root) {
  CLI::App* bench = find_or_add_subcommand(
      root, "bench", "Benchmarks: a whole model (--model), or a subcommand (ops, attention)");
  bench->require_subcommand(0, 1);
  auto o = std::make_shared<BenchOptions>();
  bench->add_option("--model", o->model, "Preset name or checkpoint to benchmark");
  bench->add_option("--batch", o->batches, "Batch sizes, comma separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  bench->add_option("--reps", o->reps, "Timed repetitions per batch (default 10 / 5)")
      ->check(CLI::NonNegativeNumber);
  bench->add_flag("--vs-torch", o->vs_torch,
                  "Also run the PyTorch peer (needs /usr/bin/python3 with torch) and print ratios");
  bench->add_option("--device", o->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  bench->add_flag("--json", o->json, "Print JSON (every batch's median, min, max, img/s, ...)");
  bench
      ->add_option("--background-load", o->background_load,
                   "Run N busy processes beside the measurement (a shared machine), peers too")
      ->check(CLI::Range(0, 64));
  add_precision_option(bench, o->precision);
  bench->callback([o, bench] {
    if (!bench->get_subcommands().empty()) return;  // `bench ops`, `bench attention`
    if (o->model.empty()) {
      throw ExitError{2,
                      "bench: give --model PRESET_OR_CHECKPOINT, or a subcommand (see "
                      "`vitpe bench --help`)"};
    }
    run_bench(*o);
  });
}

VITPE_COMMAND(60, setup);

}  // namespace
}  // namespace vitpe::app
