// `vitpe bench --model NAME_OR_CHECKPOINT --batch 1,8 [--vs-torch] [--vs-peers]
// [--background-load N]`: inference latency, throughput, GFLOP/s and peak memory of a whole model;
// with --vs-torch the PyTorch peer (scripts/torch_peer_bench.py, Debian's PyTorch: eager and
// TorchScript-frozen) runs on the same threads in the same run and the ratios are printed; with
// --vs-peers the stronger peers (scripts/peers_bench.py in scripts/peers-setup's venv: timm's model
// of the preset in PyTorch 2.x eager and torch.compile, ONNX Runtime, OpenVINO) do, and each batch
// is compared with its fastest peer. --background-load N runs N busy processes (a spinning loop
// each, like `yes > /dev/null`) for the whole measurement, peers included: the shared machine of a
// library's users, reproducible.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench/background_load.h"
#include "apps/bench/bench_model_cuda.h"
#include "apps/bench/fma_peak.h"
#include "apps/bench/measure.h"
#include "apps/bench/peer.h"
#include "apps/bench/peers_python.h"
#include "apps/bench/profile_table.h"
#include "apps/command.h"
#include "apps/model_options.h"
#include "ops/adaptive_threads.h"
#include "ops/op_profile.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "vit/io/checkpoint.h"
#include "vit/models/streams.h"

namespace vitpe::app {
namespace {

struct BenchOptions {
  std::string model;
  std::vector<int> batches{1, 8};
  int reps = 0;
  bool vs_torch = false;
  bool vs_peers = false;
  std::string peers_python;  // "" for the default venv's
  bool json = false;
  std::string device = "cpu";
  std::string precision = "f32";
  int background_load = 0;
  bool fixed_threads = false;
  bool vs_f32 = false;
  bool profile = false;
  int streams = 1;
  bool no_pack = false;
};

// --profile: the forward's time by class of op (ops/op_profile.h) over `reps` more calls, with the
// linears' and attention's rates against the FMA peak; printed, and returned for the JSON.
nlohmann::json profile_forward(const std::function<double()>& forward, int reps, double fma,
                               bool print) {
  op_profile_enable(true);
  double wall_ms = 0;
  for (int k = 0; k < reps; ++k) wall_ms += forward();
  const OpTotals t = op_profile_take();
  op_profile_enable(false);
  return profile_table(t, reps, wall_ms / reps, "forward", fma, print);
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

std::map<int, TorchResult> run_torch_inference_peer(const BenchOptions& o, int threads) {
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

// Timed repetitions of batch B: --reps, else 10 at batch 1 and 5 above (the peers' too).
int reps_of(const BenchOptions& o, int B) { return o.reps ? o.reps : (B == 1 ? 10 : 5); }

// vitpe's times of one batch, in ms.
struct BatchTiming {
  double median = 0, min = 0, max = 0;
};

// The config fields that do not change what the peers' model computes at a given input size:
// the input size (the peers are told it), the encoding (said in a note), the preprocessing.
bool peers_ignore_field(const std::string& key) {
  for (const char* k : {"name", "label", "img_size", "encoding", "eps", "crop_pct", "crop_mode",
                        "interpolation", "mean", "std", "labels"}) {
    if (key == k) return true;
  }
  return false;
}

// timm's name of the model being benchmarked, for scripts/peers_bench.py (timm.create_model):
// the registry preset it came from (a preset's, a vitpe checkpoint's or timm's config.json name)
// when that preset is one of timm's, and the model has that preset's architecture. The registry's
// own small models are its primary names spelt with dashes (vit-fmnist); timm's never have one
// (their dashed aliases, vitpe's first spelling, resolve to them). Throws a usage error naming
// what is missing otherwise.
std::string timm_name_for_peers(const ModelConfig& c, const std::string& model) {
  const ModelConfig timm = is_preset(c.name) ? preset(c.name) : ModelConfig{};
  if (timm.name.empty() || timm.name.find('-') != std::string::npos) {
    throw ExitError{
        2, fmt::format("bench --vs-peers: {} has no timm model name (its config says '{}'); the "
                       "peers run timm's models, so give a preset imported from timm (e.g. "
                       "vit_small_patch16_224, swin_tiny_patch4_window7_224) or a checkpoint of "
                       "one",
                       model, c.name)};
  }
  const auto ours = nlohmann::json::parse(c.to_json()),
             theirs = nlohmann::json::parse(timm.to_json());
  std::vector<std::string> differ;
  for (const auto& [key, value] : ours.items()) {
    if (peers_ignore_field(key) || (theirs.contains(key) && theirs[key] == value)) continue;
    differ.push_back(fmt::format("{} {} (timm: {})", key, value.dump(),
                                 theirs.contains(key) ? theirs[key].dump() : "none"));
  }
  if (!differ.empty()) {
    throw ExitError{2, fmt::format("bench --vs-peers: {} is timm's {} with another architecture, "
                                   "which timm has no model of: {}",
                                   model, timm.name, fmt::join(differ, ", "))};
  }
  return timm.name;
}

// Runs scripts/peers_bench.py (VITPE_PEERS_SCRIPT overrides it) with the peers' Python on this
// run's threads, batches, repetitions and input size; its progress goes to stderr as it runs.
// Returns its JSON object (model, versions, results: one row per runtime and batch); throws when
// it printed none.
nlohmann::json run_peers(const BenchOptions& o, const std::string& python,
                         const std::string& timm_name, const ModelConfig& c, int threads) {
  std::string script = VITPE_SOURCE_DIR "/scripts/peers_bench.py";
  if (const char* env = std::getenv("VITPE_PEERS_SCRIPT")) script = env;
  std::vector<int> reps;
  for (int B : o.batches) reps.push_back(reps_of(o, B));
  // vitpe in int8 also meets ONNX Runtime's dynamically quantised model (onnxruntime-int8).
  const std::string cmd = fmt::format(
      "OMP_NUM_THREADS={} {} {} --model {} --threads {} --batches {} --reps {} --img-size {}x{}{}",
      threads, shell_quote(python), shell_quote(script), shell_quote(timm_name), threads,
      fmt::join(o.batches, ","), fmt::join(reps, ","), c.img_rows, c.img_cols,
      o.precision == precision_name(Precision::int8) ? " --with-int8" : "");
  std::fprintf(stderr, "running the peers: %s\n", cmd.c_str());
  std::fflush(stdout);  // before popen's fork, as for the background load
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("bench --vs-peers: could not start " + python);
  nlohmann::json result;
  std::string line, other;  // other: the lines that are not the result
  auto take = [&] {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("results")) result = std::move(j);
    } catch (const nlohmann::json::exception&) {
      other += line;
    }
    line.clear();
  };
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) {
    line += buf;
    if (line.back() == '\n') take();  // else a line longer than buf goes on
  }
  if (!line.empty()) take();  // the last line, without a newline
  const int status = pclose(pipe);
  if (status != 0 || result.is_null()) {
    throw std::runtime_error(fmt::format(
        "bench --vs-peers: the peers' script {} (exit status {}); its messages are above{}",
        result.is_null() ? "printed no result" : "failed",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1,
        other.empty() ? "" : ", and it printed:\n" + other));
  }
  return result;
}

// "3.4 (3.1-3.9)": a median and its range, in ms.
std::string median_range(double median, double min, double max) {
  return fmt::format("{:.1f} ({:.1f}-{:.1f})", median, min, max);
}

// Each batch against its fastest peer: vitpe's median and range, every peer's median, and how
// much faster vitpe is (> 1) or slower (< 1): in latency at batch 1, in throughput above (the
// same quotient of medians at one batch, said as what matters there). Adds "comparison" to
// `peers` and prints the table unless json; failed peers are listed with their errors.
void compare_with_peers(nlohmann::json& peers, const std::map<int, BatchTiming>& ours,
                        const BenchOptions& o) {
  std::vector<std::string> runtimes;  // in the script's order
  for (const auto& r : peers["results"]) {
    const auto name = r["runtime"].get<std::string>();
    if (std::find(runtimes.begin(), runtimes.end(), name) == runtimes.end())
      runtimes.push_back(name);
  }
  auto find = [&](const std::string& runtime, int B) -> const nlohmann::json* {
    for (const auto& r : peers["results"]) {
      if (r["runtime"] == runtime && r["batch"] == B) return &r;
    }
    return nullptr;
  };
  if (!o.json) {
    std::printf("\npeers: timm's %s, f32%s, ms per batch (median of the repetitions)\n",
                peers["model"].get<std::string>().c_str(),
                std::find(runtimes.begin(), runtimes.end(), "onnxruntime-int8") != runtimes.end()
                    ? " (onnxruntime-int8: ONNX Runtime's quantize_dynamic model)"
                    : "");
    std::printf("%6s %-24s", "batch", "vitpe median (min-max)");
    for (const auto& r : runtimes) std::printf(" %14s", r.c_str());
    std::printf("  %-14s %s\n", "fastest peer", "vitpe against it");
  }
  peers["comparison"] = nlohmann::json::array();
  for (int B : o.batches) {
    const BatchTiming& t = ours.at(B);
    std::string best;
    double best_ms = 0;
    if (!o.json) std::printf("%6d %-24s", B, median_range(t.median, t.min, t.max).c_str());
    for (const auto& name : runtimes) {
      const nlohmann::json* r = find(name, B);
      const bool ok = r && r->contains("median_ms");
      const double ms = ok ? (*r)["median_ms"].get<double>() : 0;
      if (ok && (best.empty() || ms < best_ms)) {
        best = name;
        best_ms = ms;
      }
      // No row: a runtime that does not run at this batch (openvino-tput at batch 1).
      if (!o.json)
        std::printf(" %14s", ok ? fmt::format("{:.1f}", ms).c_str() : r ? "failed" : "-");
    }
    if (best.empty()) {
      if (!o.json) std::printf("  %-14s\n", "none ran");
      continue;
    }
    const double ratio = best_ms / t.median;  // vitpe's speed over the fastest peer's
    const std::string measure = B == 1 ? "latency" : "throughput";
    peers["comparison"].push_back({{"batch", B},
                                   {"vitpe_median_ms", t.median},
                                   {"fastest_peer", best},
                                   {"fastest_peer_median_ms", best_ms},
                                   {"ratio", ratio},
                                   {"measure", measure}});
    if (o.json) continue;
    const std::string said = B == 1 ? (ratio >= 1 ? fmt::format("{:.2f}x faster", ratio)
                                                  : fmt::format("{:.2f}x slower", 1 / ratio))
                                    : fmt::format("{:.2f}x the img/s ({:.0f} vs {:.0f})", ratio,
                                                  B * 1e3 / t.median, B * 1e3 / best_ms);
    std::printf("  %-14s %s\n", best.c_str(), said.c_str());
  }
  if (o.json) return;
  for (const auto& r : peers["results"]) {
    if (r.contains("error")) {
      std::printf("%s failed at batch %d: %s\n", r["runtime"].get<std::string>().c_str(),
                  r["batch"].get<int>(), r["error"].get<std::string>().c_str());
    }
  }
  std::vector<std::string> versions;
  for (const auto& [name, v] : peers["versions"].items()) {
    versions.push_back(name + " " + (v.is_string() ? v.get<std::string>() : "missing"));
  }
  std::printf("peers' versions: %s\n", fmt::format("{}", fmt::join(versions, ", ")).c_str());
}

void run_bench(const BenchOptions& o) {
  if (o.device == "cuda") {
    if (o.vs_torch || o.vs_peers || o.background_load || o.vs_f32 || o.profile) {
      throw ExitError{2,
                      "bench --device cuda: --vs-torch, --vs-peers, --vs-f32, --profile and "
                      "--background-load are for the CPU"};
    }
    run_model_bench_cuda({o.model, o.batches, o.reps, o.precision, o.json});
    return;
  }
  if (o.streams > 1 && (o.vs_f32 || o.profile || o.vs_torch)) {
    throw ExitError{2,
                    "bench --streams: times concurrent forwards of one model; --vs-f32, "
                    "--vs-torch and --profile time one forward at a time"};
  }
  // Streams run fixed shares of the threads, as a Classifier with streams does.
  const bool adapt = !o.fixed_threads && adaptive_threads_default() && o.streams == 1;
  LoadedModel loaded = load_model(o.model);
  Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  const int threads = num_threads();
  const double weights_mib = model.num_params() * 4.0 / (1 << 20);
  const Precision precision = parse_precision(o.precision);
  if (o.vs_f32 && precision == Precision::f32) {
    throw ExitError{2,
                    "bench: --vs-f32 times --precision int8, bf16 or bf16-emulated against f32; "
                    "found --precision f32"};
  }
  // As a Classifier runs it: the weights converted once (f32: packed for the CPU's matmul).
  model.set_precision(precision, !o.no_pack);
  // --vs-f32: a second, f32 copy of the model, timed call by call in turn with the first.
  LoadedModel reference;
  if (o.vs_f32) {
    reference = load_model(o.model);
    reference.model->set_precision(Precision::f32, !o.no_pack);
  }
  // The peers are checked before any measurement: a run never times vitpe to find no peers.
  std::string timm_name, python;
  if (o.vs_peers) {
    timm_name = timm_name_for_peers(c, o.model);
    python = require_peers_python(o.peers_python, "bench");
  }
  nlohmann::json out = {{"model", o.model},
                        {"kind", c.family},
                        {"encoding", c.encoding.str()},
                        {"parameters", model.num_params()},
                        {"threads", threads},
                        {"precision", o.precision},
                        {"background_load", o.background_load},
                        {"adaptive_threads", adapt},
                        {"vs_f32", o.vs_f32},
                        {"results", nlohmann::json::array()}};
  // --profile reads the linears' and attention's rates against the FMA peak, measured quietly
  // (before any background load starts).
  FmaPeak fma_peak;
  if (o.profile) {
    fma_peak = measure_fma_peak(threads);
    out["fma_peak_gflops_per_s"] = fma_peak.for_onednn();
  }
  if (!o.json) {
    std::printf(
        "model %s (%s, encoding %s), %.1fM parameters (%.0f MiB f32), %d threads, %s linears\n",
        o.model.c_str(), c.family_label().c_str(), c.encoding.str().c_str(),
        model.num_params() / 1e6, weights_mib, threads, o.precision.c_str());
    if (o.profile) std::printf("%s\n", fma_peak.describe().c_str());
    if (o.background_load) {
      std::printf("background load: %d busy process%s beside the measurement\n", o.background_load,
                  o.background_load == 1 ? "" : "es");
    }
    std::printf("%6s %12s %10s %10s %14s  %s\n", "batch", "median ms", "img/s", "GFLOP/s",
                "peak RSS MiB", adapt ? "threads used (calls)" : "");
  }
  // --streams N: N replicas sharing the weights, threads / N threads each (vit/models/streams.h).
  std::unique_ptr<ModelStreams> streams;
  if (o.streams > 1) {
    streams = std::make_unique<ModelStreams>(model, o.streams, std::max(1, threads / o.streams));
    out["streams"] = o.streams;
    out["threads_per_stream"] = streams->threads_per_stream();
    if (!o.json) {
      std::printf(
          "streams: %d concurrent forwards of %d thread%s each, the batch split over them\n",
          o.streams, streams->threads_per_stream(), streams->threads_per_stream() == 1 ? "" : "s");
    }
  }
  std::fflush(stdout);  // before fork: the children must not inherit unwritten output
  const BackgroundLoad load(o.background_load, "bench");
  out["background_pids"] = load.pids();  // gone when the command returns (a test checks)
  std::map<int, BatchTiming> ours;
  Rng rng(0);
  for (int B : o.batches) {
    Tensor x = Tensor::empty({B, c.channels, c.img_rows, c.img_cols});
    rng.fill_normal(x, 1.0);
    nlohmann::json row = {{"batch", B}};
    if (precision != Precision::f32) {
      // The logits' error against f32 on this input, then the timed runs in `precision`.
      model.set_precision(Precision::f32, !o.no_pack);
      const Tensor ref = model.forward(x).clone();
      model.set_precision(precision);
      row["max_rel_logit_error"] = max_rel_diff(ref, model.forward(x));
      if (!o.json) {
        std::printf("%6d  max |logit - f32 logit| / max |f32 logit| = %.2e\n", B,
                    row["max_rel_logit_error"].get<double>());
      }
    }
    const int reps = reps_of(o, B);
    // The thread count adapts to the machine's load as a Classifier's does (ops/
    // adaptive_threads.h); the warm-up covers its first probe, so the timed calls are what a
    // long-running user sees, and the counts used are printed. --fixed-threads keeps T.
    AdaptiveThreads adaptive(adapt), adaptive_f32(adapt);
    // `split`: the streams to run the batch over (the timed model's), null for one forward.
    const auto timed_forward = [&](Model& m, AdaptiveThreads& a, ModelStreams* split) {
      AdaptiveThreads::Call call(a, static_cast<uint64_t>(B));
      auto t0 = std::chrono::steady_clock::now();
      if (split) {
        split->run(B,
                   [&](Model& r, int64_t begin, int64_t end) { r.forward(x.slice(begin, end)); });
      } else {
        m.forward(x);
      }
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
          .count();
    };
    const int warm_up = adapt ? 8 : 2;
    for (int i = 0; i < warm_up; ++i) {  // primitives, buffers, the first probe
      timed_forward(model, adaptive, streams.get());
      if (o.vs_f32) timed_forward(*reference.model, adaptive_f32, nullptr);
    }
    const std::map<int, int64_t> warm_counts = adaptive.calls_per_count();
    // With --vs-f32 the two models run in turn, each first in every other pair, so that a change
    // of the machine's speed during the run falls on both alike.
    std::vector<double> ms, ms_f32, speedups;
    for (int i = 0; i < reps; ++i) {
      const bool f32_first = o.vs_f32 && i % 2 == 1;
      if (f32_first) ms_f32.push_back(timed_forward(*reference.model, adaptive_f32, nullptr));
      ms.push_back(timed_forward(model, adaptive, streams.get()));
      if (o.vs_f32 && !f32_first)
        ms_f32.push_back(timed_forward(*reference.model, adaptive_f32, nullptr));
      if (o.vs_f32) speedups.push_back(ms_f32.back() / ms.back());
    }
    std::map<int, int64_t> timed_counts = adaptive.calls_per_count();
    for (const auto& [t, n] : warm_counts) timed_counts[t] -= n;
    std::string used;
    nlohmann::json used_json = nlohmann::json::object();
    for (auto it = timed_counts.rbegin(); it != timed_counts.rend(); ++it) {
      if (it->second == 0) continue;
      used += fmt::format("{}{} ({})", used.empty() ? "" : ", ", it->first, it->second);
      used_json[std::to_string(it->first)] = it->second;
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double gflops = model.flops_per_image() * B / (med * 1e6);
    ours[B] = {med, ms.front(), ms.back()};
    row["median_ms"] = med;
    row["min_ms"] = ms.front();
    row["max_ms"] = ms.back();
    row["img_per_s"] = B * 1000.0 / med;
    row["gflops_per_s"] = gflops;
    row["peak_rss_mib"] = peak_rss_mib();
    row["threads_used"] = used_json;  // thread count -> timed calls
    out["results"].push_back(row);
    if (!o.json) {
      std::printf("%6d %12.1f %10.1f %10.1f %14.0f  %s\n", B, med, B * 1000.0 / med, gflops,
                  peak_rss_mib(), adapt ? used.c_str() : "");
    }
    // With --profile the whole forward's rate (the timed calls above, which ran without the ops
    // timing themselves) against the FMA peak, beside the op classes' in the profile below.
    if (o.profile && fma_peak.for_onednn() > 0) {
      const double of_fma = gflops / fma_peak.for_onednn();
      out["results"].back()["of_fma_peak"] = of_fma;
      if (!o.json) {
        std::printf("%6s the whole forward at %.0f%% of the FMA peak (%.1f GFLOP/s)\n", "",
                    100 * of_fma, fma_peak.for_onednn());
      }
    }
    if (o.vs_f32) {
      std::sort(ms_f32.begin(), ms_f32.end());
      std::sort(speedups.begin(), speedups.end());
      const double f32_med = ms_f32[ms_f32.size() / 2], speedup = speedups[speedups.size() / 2];
      out["results"].back()["f32_median_ms"] = f32_med;
      out["results"].back()["f32_min_ms"] = ms_f32.front();
      out["results"].back()["f32_max_ms"] = ms_f32.back();
      out["results"].back()["speedup_vs_f32"] = speedup;
      out["results"].back()["speedup_vs_f32_min"] = speedups.front();
      out["results"].back()["speedup_vs_f32_max"] = speedups.back();
      if (!o.json) {
        std::printf(
            "%6s f32 in turn: %.1f ms (%.1f-%.1f); %s is %.2fx as fast (median of %zu pairs, "
            "%.2f-%.2f)\n",
            "", f32_med, ms_f32.front(), ms_f32.back(), o.precision.c_str(), speedup,
            speedups.size(), speedups.front(), speedups.back());
      }
    }
    if (o.profile) {
      out["results"].back()["profile"] =
          profile_forward([&] { return timed_forward(model, adaptive, streams.get()); }, reps,
                          fma_peak.for_onednn(), !o.json);
    }
    if (!o.json) std::fflush(stdout);
  }
  const double converted_mib = static_cast<double>(model.converted_weight_bytes()) / (1 << 20);
  if (!o.json) {
    std::printf(
        "memory: weights %.0f MiB%s; peak RSS is for the whole process so far\n", weights_mib,
        converted_mib > 0 ? fmt::format(" + {:.0f} MiB {}", converted_mib,
                                        precision == Precision::f32 ? "packed for the CPU's matmul"
                                                                    : "converted to " + o.precision)
                                .c_str()
                          : "");
  }
  out["converted_weights_mib"] = converted_mib;
  if (o.vs_torch) {
    auto torch = run_torch_inference_peer(o, threads);
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
        const double med = ours[B].median;
        std::printf("%6d %12.1f %14.1f %11.2fx %16.1f %13.2fx\n", B, med, it->second.eager_ms,
                    it->second.eager_ms / med, it->second.jit_ms, it->second.jit_ms / med);
      }
    }
  }
  if (o.vs_peers) {
    nlohmann::json peers = run_peers(o, python, timm_name, c, threads);
    peers["python"] = python;
    compare_with_peers(peers, ours, o);
    const EncodingSpec timm_encoding = preset(timm_name).encoding;
    if (c.encoding != timm_encoding) {
      peers["note"] = fmt::format("the peers run timm's position encoding ({}); vitpe ran {}",
                                  timm_encoding.str(), c.encoding.str());
    }
    if (precision != Precision::f32) {
      peers["note"] = fmt::format(
          "{}{}the peers run f32{}; vitpe ran {}", peers.value("note", ""),
          peers.contains("note") ? "; " : "",
          precision == Precision::int8 ? " but onnxruntime-int8 (dynamic int8, as vitpe's)" : "",
          o.precision);
    }
    if (!o.json && peers.contains("note")) {
      std::printf("note: %s\n", peers["note"].get<std::string>().c_str());
    }
    out["peers"] = std::move(peers);
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
}

void add_bench_model(CLI::App& root) {
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
  add_peers_options(bench, o->vs_peers, o->peers_python,
                    "Also run the stronger CPU peers: PyTorch 2.x eager and compiled, ONNX "
                    "Runtime, OpenVINO, on timm's model of the preset");
  bench->add_option("--device", o->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  bench->add_flag("--json", o->json, "Print JSON (every batch's median, min, max, img/s, ...)");
  bench
      ->add_option("--background-load", o->background_load,
                   "Run N busy processes beside the measurement (a shared machine), peers too")
      ->check(CLI::Range(0, 64));
  add_precision_option(bench, o->precision);
  bench->add_flag("--vs-f32", o->vs_f32,
                  "Also time an f32 copy of the model, call by call in turn with --precision, and "
                  "print the speed-up (the median of the pairs' ratios)");
  bench->add_flag("--profile", o->profile,
                  "After the timed calls, as many more with the time split by class of op "
                  "(linear, attention, layernorm, softmax, GELU, copies, ...) and the linears' and "
                  "attention's GFLOP/s against the FMA peak (a register-only loop)");
  bench
      ->add_option("--streams", o->streams,
                   "Throughput streams: N concurrent forwards of threads / N threads each, the "
                   "batch split over them (ClassifierOptions::streams; OpenVINO's THROUGHPUT "
                   "hint); fixed thread counts")
      ->check(CLI::Range(1, 64));
  bench->add_flag("--no-pack", o->no_pack,
                  "f32: leave the linear weights in their plain layout (ClassifierOptions::"
                  "pack_weights = false): one copy of them, repacked by the matmul on every call");
  bench->add_flag("--fixed-threads", o->fixed_threads,
                  "Run every call on all the threads; by default a call runs on fewer when that "
                  "is faster on a busy machine, as a Classifier does (VITPE_ADAPTIVE_THREADS=0 "
                  "makes fixed the default)");
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

VITPE_COMMAND(60, "bench", computes, add_bench_model);

}  // namespace
}  // namespace vitpe::app
