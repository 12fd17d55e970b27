// `vitpe bench train [--model vit-fmnist] [--encoding SPEC] [--batch 128] [--vs-torch]`: the
// time of one training step (forward, loss, backward, gradient clipping, AdamW) on a fixed
// random batch, split by phase, and the evaluation throughput at the same batch. With
// --vs-torch the PyTorch peer (scripts/torch_train_peer.py: torchvision's ViT of the vit-fmnist
// shape with the same pooling, AdamW, the method of ../shared/peers/torch_train_bench.py) runs on
// the same threads in the same run and the ratios are printed. Data loading is not part of the
// step; `vitpe train` reports the throughput of whole epochs.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/command.h"
#include "apps/peer.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "ops/util.h"
#include "vit/models/model.h"
#include "vit/train/optim.h"
#include "vit/train/train.h"

namespace vitpe::app {
namespace {

struct BenchTrainOptions {
  std::string model = "vit-fmnist";
  std::string encoding;
  std::vector<std::string> overrides;
  int batch = 128;
  int reps = 10;
  bool vs_torch = false;
};

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct TorchTrain {
  double train_ms = 0, eval_img_s = 0;
};

// Runs the peer; returns train_ms = 0 when it could not run (and says why on stderr).
TorchTrain run_torch_peer(const BenchTrainOptions& o, const ModelConfig& config, int threads) {
  std::string script = VITPE_SOURCE_DIR "/scripts/torch_train_peer.py";
  if (const char* env = std::getenv("VITPE_TORCH_TRAIN_PEER")) script = env;
  const std::string cmd = fmt::format("/usr/bin/python3 '{}' {} {} {} {} 2>&1", script, threads,
                                      o.batch, o.reps, config.class_token ? "token" : "avg");
  TorchTrain r;
  const bool ok = run_json_peer(cmd, [&](const nlohmann::json& j) {
    r.train_ms = j.at("train_ms").get<double>();
    r.eval_img_s = j.at("eval_img_s").get<double>();
  });
  if (!ok || r.train_ms <= 0) r = {};
  return r;
}

// The shape scripts/torch_train_peer.py builds: vit-fmnist's, with either pooling.
bool torch_peer_shape(const ModelConfig& c) {
  const ModelConfig p = preset("vit-fmnist");
  return c.kind == ModelKind::vit && c.img_rows == p.img_rows && c.img_cols == p.img_cols &&
         c.channels == p.channels && c.patch == p.patch && c.dim == p.dim && c.depth == p.depth &&
         c.heads == p.heads && c.mlp_dim == p.mlp_dim && c.classes == p.classes &&
         c.class_token == (c.pool == Pool::cls);
}

// Medians of the timed training steps by phase, and of the eval forward.
struct StepTimes {
  double forward = 0, backward = 0, update = 0, step = 0, eval = 0;
  double cpu_use = 0;  // process CPU time / (wall time x threads) over the steps
};

// Times `reps` training steps (after 3 warm-up steps: primitives, buffers, optimizer state) of
// `model` on a fixed batch, then `reps` eval forwards.
StepTimes time_steps(Model& model, const ModelConfig& config, int64_t B, int reps) {
  std::vector<Param*> params = model.params();
  AdamW opt(params);
  Rng rng(0);
  Tensor x = Tensor::empty({B, config.channels, config.img_rows, config.img_cols});
  rng.fill_normal(x, 1.0);
  std::vector<int32_t> labels(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) labels[i] = static_cast<int32_t>(i % config.classes);
  Tensor probs, dlogits;
  // One step, phase times in t[0..2].
  auto step = [&](double* t) {
    const double t0 = monotonic_seconds();
    const Tensor& logits = model.forward(x, true);
    if (!probs.defined()) {
      probs = Tensor::empty(logits.shape());
      dlogits = Tensor::empty(logits.shape());
    }
    cross_entropy_forward(probs, logits, labels.data(), 0.1f);
    dlogits.zero();
    cross_entropy_backward(dlogits, probs, labels.data(), 0.1f);
    const double t1 = monotonic_seconds();
    model.zero_grad();
    model.backward(dlogits);
    const double t2 = monotonic_seconds();
    clip_grad_norm(params, 1.0);
    opt.step(1e-4f);
    t[0] = t1 - t0;
    t[1] = t2 - t1;
    t[2] = monotonic_seconds() - t2;
  };
  double t[3];
  for (int i = 0; i < 3; ++i) step(t);
  std::vector<double> fwd, bwd, upd, total, ev;
  const double cpu0 = process_cpu_seconds(), wall0 = monotonic_seconds();
  for (int i = 0; i < reps; ++i) {
    step(t);
    fwd.push_back(t[0]);
    bwd.push_back(t[1]);
    upd.push_back(t[2]);
    total.push_back(t[0] + t[1] + t[2]);
  }
  StepTimes r;
  r.cpu_use = (process_cpu_seconds() - cpu0) / ((monotonic_seconds() - wall0) * num_threads());
  model.forward(x, false);
  for (int i = 0; i < reps; ++i) {
    const double e0 = monotonic_seconds();
    model.forward(x, false);
    ev.push_back(monotonic_seconds() - e0);
  }
  r.forward = median(fwd);
  r.backward = median(bwd);
  r.update = median(upd);
  r.step = median(total);
  r.eval = median(ev);
  return r;
}

void print_phases(const StepTimes& t, int64_t B, double flops, int threads) {
  std::printf("%-28s %10s\n", "phase (median of steps)", "ms");
  std::printf("%-28s %10.1f\n", "forward + loss", t.forward * 1e3);
  std::printf("%-28s %10.1f\n", "backward", t.backward * 1e3);
  std::printf("%-28s %10.1f\n", "clip + AdamW", t.update * 1e3);
  std::printf("%-28s %10.1f   %.0f img/s, %.1f GFLOP/s (3x forward FLOPs)\n", "step", t.step * 1e3,
              B / t.step, flops / t.step / 1e9);
  std::printf("%-28s %10.1f   %.0f img/s\n", "eval forward (no grad)", t.eval * 1e3, B / t.eval);
  std::printf(
      "cpu use during the steps: %.0f%% of %d threads%s\n", 100 * t.cpu_use, threads,
      t.cpu_use < 0.85 ? " (below 85%: other processes shared the cores, or threads idled)" : "");
}

void print_vs_torch(const BenchTrainOptions& o, const ModelConfig& config, const StepTimes& t,
                    int threads) {
  if (!torch_peer_shape(config)) {
    std::printf(
        "--vs-torch: the PyTorch peer trains the vit-fmnist shape only (pooling and "
        "encoding may differ); skipped\n");
    return;
  }
  const TorchTrain torch = run_torch_peer(o, config, threads);
  if (torch.train_ms <= 0) return;
  const int64_t B = o.batch;
  std::printf("\nPyTorch peer: torchvision ViT, %s, learned 1D positions\n",
              config.class_token ? "class token (50 tokens)" : "mean pooling (49 tokens)");
  std::printf("\n%-22s %10s %10s %10s\n", "", "vitpe", "torch", "ratio");
  std::printf("%-22s %10.0f %10.0f %9.2fx\n", "train img/s", B / t.step, B / (torch.train_ms / 1e3),
              (torch.train_ms / 1e3) / t.step);
  std::printf("%-22s %10.0f %10.0f %9.2fx\n", "eval img/s", B / t.eval, torch.eval_img_s,
              (B / t.eval) / torch.eval_img_s);
  if (config.encoding != "learned1d") {
    std::printf("note: the peer uses learned 1D positions; this run used %s\n",
                config.encoding.c_str());
  }
}

void run_bench_train(const BenchTrainOptions& o) {
  ModelConfig config = apply_overrides(preset(o.model), o.overrides);
  if (!o.encoding.empty()) config.encoding = o.encoding;
  std::unique_ptr<Model> model = make_model(config, 0);
  const int threads = num_threads();
  std::printf("training step: %s (encoding %s), %.2fM parameters, batch %lld, %d threads\n",
              o.model.c_str(), config.encoding.c_str(), model->num_params() / 1e6,
              static_cast<long long>(o.batch), threads);
  const StepTimes t = time_steps(*model, config, o.batch, o.reps);
  print_phases(t, o.batch, 3.0 * model->flops_per_image() * static_cast<double>(o.batch), threads);
  if (o.vs_torch) print_vs_torch(o, config, t, threads);
}

void setup(CLI::App& root) {
  CLI::App* bench = find_or_add_subcommand(
      root, "bench", "Benchmarks: a whole model (--model), or a subcommand (ops, attention)");
  auto o = std::make_shared<BenchTrainOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "train",
      "One training step (forward, backward, AdamW) on a random batch, by phase; with "
      "--vs-torch against PyTorch");
  cmd->add_option("--model", o->model, preset_help())->capture_default_str();
  cmd->add_option("--set", o->overrides,
                  "Override a config field of the preset, key=value (e.g. depth=2); repeatable");
  cmd->add_option("--encoding", o->encoding, "Positional encoding spec (default: the preset's)");
  cmd->add_option("--batch", o->batch, "Batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Timed steps; the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--vs-torch", o->vs_torch,
                "Also run the PyTorch peer (needs /usr/bin/python3 with torch) and print ratios");
  cmd->callback([o] { run_bench_train(*o); });
}

VITPE_COMMAND(63, setup);

}  // namespace
}  // namespace vitpe::app
