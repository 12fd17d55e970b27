// `vitpe bench train [--model vit-fmnist] [--encoding SPEC] [--batch 128] [--vs-torch]`: the
// time of one training step (forward, loss, backward, gradient clipping, AdamW) on a fixed
// random batch, split by phase, and the evaluation throughput at the same batch. With
// --vs-torch the PyTorch peer (scripts/torch_train_peer.py: torchvision's ViT of the vit-fmnist
// shape with the same pooling, AdamW, the method of ../shared/peers/torch_train_bench.py) runs on
// the same threads in the same run and the ratios are printed; --vs-peers runs the same script
// with PyTorch 2.x from the venv of scripts/peers-setup instead of Debian's PyTorch 1.13;
// --rounds N alternates vitpe's timing and the peer N times and prints the median ratio. Data
// loading is not part of the step; `vitpe train` reports the throughput of whole epochs.
// --background-load N runs N busy processes beside it all. --profile then splits the forward and
// the backward by class of op over as many more steps. --json FILE also writes the numbers.
//
// Data-parallel scaling in one run, `mpirun -np N --bind-to none vitpe bench train ...`:
//   A. "1 process x T threads": rank 0 alone times the step at the global batch with every CPU
//      it may run on, as without mpirun, while the other ranks sleep in a barrier;
//   B. "N ranks x T/N threads": every rank, with its share of the threads (or --threads), times
//      the data-parallel step of `vitpe train` on its batch/N rows: forward and backward with
//      the loss scaled by its share, allreduce_gradients (timed apart: the communication), clip,
//      AdamW. A step takes as long as its slowest rank.
// Rank 0 prints both, the scaling efficiency (the ratio of their throughputs) and the gradient
// bytes each rank exchanges; the other ranks print nothing. For the ranks of one node: phase A
// has rank 0's cores only.
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench/background_load.h"
#include "apps/bench/fma_peak.h"
#include "apps/bench/measure.h"
#include "apps/bench/peer.h"
#include "apps/bench/peers_python.h"
#include "apps/bench/profile_table.h"
#include "apps/command.h"
#include "ops/files.h"
#include "ops/op_profile.h"
#include "ops/ops.h"
#include "ops/random.h"
#include "ops/util.h"
#include "vit/models/model.h"
#include "vit/train/distributed.h"
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
  int rounds = 1;
  int background_load = 0;
  bool vs_torch = false;
  bool vs_peers = false;
  bool profile = false;
  std::string peers_python;  // "" for the default venv's
  std::string json;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct TorchTrain {
  double train_ms = 0, eval_img_s = 0;
  std::string version;  // torch.__version__, where the script says it
};

// Runs the peer with `python` (Debian's for --vs-torch, the venv's for --vs-peers); returns
// train_ms = 0 when it could not run (and says why on stderr).
TorchTrain run_torch_train_peer(const BenchTrainOptions& o, const ModelConfig& config, int threads,
                                const std::string& python) {
  std::string script = VITPE_SOURCE_DIR "/scripts/torch_train_peer.py";
  if (const char* env = std::getenv("VITPE_TORCH_TRAIN_PEER")) script = env;
  const std::string cmd =
      fmt::format("{} {} {} {} {} {} 2>&1", shell_quote(python), shell_quote(script), threads,
                  o.batch, o.reps, config.vit().class_token ? "token" : "avg");
  TorchTrain r;
  const bool ok = run_json_peer(cmd, [&](const nlohmann::json& j) {
    r.train_ms = j.at("train_ms").get<double>();
    r.eval_img_s = j.at("eval_img_s").get<double>();
    r.version = j.value("torch", "");
  });
  if (!ok || r.train_ms <= 0) r = {};
  return r;
}

// The shape scripts/torch_train_peer.py builds: vit-fmnist's, with either pooling.
bool torch_peer_shape(const ModelConfig& c) {
  const ModelConfig p = preset("vit-fmnist");
  if (!c.is_vit()) return false;
  const VitArch &a = c.vit(), &pa = p.vit();
  return c.img_rows == p.img_rows && c.img_cols == p.img_cols && c.channels == p.channels &&
         c.patch == p.patch && a.dim == pa.dim && a.depth == pa.depth && a.heads == pa.heads &&
         a.mlp_dim == pa.mlp_dim && c.classes == p.classes &&
         a.class_token == (a.pool == Pool::cls);
}

// A fixed random batch: images [B, C, H, W] and labels (image i: class i % classes), the same on
// every rank.
struct Batch {
  Tensor images;
  std::vector<int32_t> labels;
};

Batch random_batch(const ModelConfig& config, int64_t B) {
  Rng rng(0);
  Batch b{Tensor::empty({B, config.channels, config.img_rows, config.img_cols}), {}};
  rng.fill_normal(b.images, 1.0);
  b.labels.resize(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) b.labels[i] = static_cast<int32_t>(i % config.classes);
  return b;
}

// Rows [begin, end) of a batch: one rank's share.
Batch rows_of(const Batch& b, int64_t begin, int64_t end) {
  return {b.images.slice(begin, end),
          std::vector<int32_t>(b.labels.begin() + begin, b.labels.begin() + end)};
}

// The phases of a step in the order they run; the allreduce only under several ranks.
enum Phase { kForward, kBackward, kAllreduce, kUpdate, kPhases };
using StepSample = std::array<double, kPhases>;  // seconds of one step, by phase

double total(const StepSample& t) {
  return t[kForward] + t[kBackward] + t[kAllreduce] + t[kUpdate];
}

// --profile: the ops' time by class (ops/op_profile.h) in the forward (with the loss) and in the
// backward, summed over `steps` steps run after the timed ones.
struct StepProfile {
  int steps = 0;
  OpTotals forward, backward;
  double forward_s = 0, backward_s = 0;  // wall time of the phases, summed
};

void add_totals(OpTotals& to, const OpTotals& t) {
  for (size_t c = 0; c < to.seconds.size(); ++c) {
    to.seconds[c] += t.seconds[c];
    to.calls[c] += t.calls[c];
    to.flops[c] += t.flops[c];
  }
}

// What one rank measured.
struct RankSamples {
  int threads = 0;
  int64_t rows = 0;               // its images of each step
  double cpu_use = 0;             // process CPU time / (step time x threads) over the timed steps
  std::vector<StepSample> steps;  // the timed steps
};

// Times `reps` training steps (after 3 warm-up steps: primitives, buffers, optimizer state) of
// `model` on `mine`, this rank's rows of a batch of `global_batch` images. Under `comm` of several
// ranks it is the data-parallel step of `vitpe train`: the loss scaled by this rank's share, the
// gradients summed by allreduce_gradients; the ranks start each step together (the sleeping
// barrier, then a one-number MPI allreduce, which the ranks leave within microseconds). With
// `profile`, `reps` more steps follow with the op profile on, and fill it.
RankSamples time_steps(Model& model, const Batch& mine, int64_t global_batch, Communicator& comm,
                       int reps, StepProfile* profile = nullptr) {
  const FixedWorkSplit fixed;  // the work split of `vitpe train`'s steps
  const std::vector<Param*> params = model.params();
  AdamW opt(params);
  const auto rows = static_cast<int64_t>(mine.labels.size());
  const float share = static_cast<float>(rows) / static_cast<float>(global_batch);
  Tensor probs, dlogits;
  std::vector<float> flat;
  auto start_together = [&] {
    if (comm.size() == 1) return;
    comm.barrier();
    double go = 0;
    comm.allreduce_sum(&go, 1);
  };
  OpTotals* forward_ops = nullptr;  // where the steps put their profile, while one is on
  OpTotals* backward_ops = nullptr;
  auto step = [&](StepSample& t) {
    start_together();
    if (forward_ops) op_profile_take();
    const double t0 = monotonic_seconds();
    const Tensor& logits = model.forward(mine.images, true);
    if (!probs.defined()) {
      probs = Tensor::empty(logits.shape());
      dlogits = Tensor::empty(logits.shape());
    }
    cross_entropy_forward(probs, logits, mine.labels.data(), 0.1f);
    dlogits.zero();
    cross_entropy_backward(dlogits, probs, mine.labels.data(), 0.1f, share);
    const double t1 = monotonic_seconds();
    if (forward_ops) add_totals(*forward_ops, op_profile_take());
    const double t1b = monotonic_seconds();  // taking the totals is not the backward's time
    model.zero_grad();
    model.backward(dlogits);
    const double t2 = monotonic_seconds();
    if (backward_ops) add_totals(*backward_ops, op_profile_take());
    if (comm.size() > 1) allreduce_gradients(comm, params, flat);
    const double t3 = monotonic_seconds();
    clip_grad_norm(params, 1.0);
    opt.step(1e-4f);
    t = {t1 - t0, t2 - t1b, t3 - t2, monotonic_seconds() - t3};
  };
  RankSamples r;
  r.threads = num_threads();
  r.rows = rows;
  r.steps.resize(static_cast<size_t>(reps));
  StepSample warm_up{};
  for (int i = 0; i < 3; ++i) step(warm_up);
  const double cpu0 = process_cpu_seconds();
  double busy = 0;
  for (StepSample& t : r.steps) {
    step(t);
    busy += total(t);
  }
  r.cpu_use = (process_cpu_seconds() - cpu0) / (busy * r.threads);
  if (profile) {
    forward_ops = &profile->forward;
    backward_ops = &profile->backward;
    op_profile_enable(true);
    StepSample t{};
    for (int i = 0; i < reps; ++i) {
      step(t);
      profile->forward_s += t[kForward];
      profile->backward_s += t[kBackward];
    }
    op_profile_enable(false);
    profile->steps = reps;
  }
  return r;
}

// Median of `reps` eval forwards (no gradients), after one to warm up.
double time_eval(Model& model, const Tensor& images, int reps) {
  model.forward(images, false);
  std::vector<double> ev;
  for (int i = 0; i < reps; ++i) {
    const double e0 = monotonic_seconds();
    model.forward(images, false);
    ev.push_back(monotonic_seconds() - e0);
  }
  return median(ev);
}

// Every rank's samples, in rank order, on every rank: each rank fills its slot of one vector of
// zeros and a sum over the ranks fills the others.
std::vector<RankSamples> gather_samples(Communicator& comm, const RankSamples& mine) {
  const size_t reps = mine.steps.size(), slot = 3 + reps * kPhases;
  std::vector<double> all(slot * static_cast<size_t>(comm.size()), 0.0);
  double* at = all.data() + slot * static_cast<size_t>(comm.rank());
  at[0] = mine.threads;
  at[1] = static_cast<double>(mine.rows);
  at[2] = mine.cpu_use;
  for (size_t i = 0; i < reps; ++i)
    std::copy_n(mine.steps[i].data(), kPhases, at + 3 + i * kPhases);
  comm.allreduce_sum(all.data(), static_cast<int64_t>(all.size()));
  std::vector<RankSamples> out(static_cast<size_t>(comm.size()));
  for (size_t r = 0; r < out.size(); ++r) {
    const double* from = all.data() + slot * r;
    out[r].threads = static_cast<int>(from[0]);
    out[r].rows = static_cast<int64_t>(from[1]);
    out[r].cpu_use = from[2];
    out[r].steps.resize(reps);
    for (size_t i = 0; i < reps; ++i)
      std::copy_n(from + 3 + i * kPhases, kPhases, out[r].steps[i].data());
  }
  return out;
}

// Medians over the timed steps. A step takes as long as its slowest rank (step, and its min and
// max over the steps); forward, backward and update are the slowest rank's; the allreduce is the
// one of the rank that arrived last (the transfer itself), and allreduce_wait is how much longer
// the first one waited in it (a slower rank's compute).
struct StepTimes {
  double forward = 0, backward = 0, allreduce = 0, allreduce_wait = 0, update = 0;
  double step = 0, step_min = 0, step_max = 0;
  double eval = 0;         // eval forward (alone only)
  double cpu_use = 0;      // rank 0's
  nlohmann::json profile;  // --profile (alone only): {forward, backward, fma_peak_gflops_per_s}
  nlohmann::json peers;    // --vs-torch / --vs-peers (alone only): what vs_torch returned
};

StepTimes summarise(const std::vector<RankSamples>& ranks) {
  std::vector<double> phase[kPhases], wait, step;
  for (size_t i = 0; i < ranks[0].steps.size(); ++i) {
    StepSample slowest{};
    double first = 0, last = std::numeric_limits<double>::infinity(), longest = 0;
    for (const RankSamples& r : ranks) {
      const StepSample& t = r.steps[i];
      for (int p = 0; p < kPhases; ++p) slowest[p] = std::max(slowest[p], t[p]);
      first = std::max(first, t[kAllreduce]);
      last = std::min(last, t[kAllreduce]);
      longest = std::max(longest, total(t));
    }
    for (int p = 0; p < kPhases; ++p) phase[p].push_back(slowest[p]);
    phase[kAllreduce].back() = last;
    wait.push_back(first - last);
    step.push_back(longest);
  }
  StepTimes t;
  t.forward = median(phase[kForward]);
  t.backward = median(phase[kBackward]);
  t.allreduce = median(phase[kAllreduce]);
  t.allreduce_wait = median(wait);
  t.update = median(phase[kUpdate]);
  t.step = median(step);
  t.step_min = *std::min_element(step.begin(), step.end());
  t.step_max = *std::max_element(step.begin(), step.end());
  t.cpu_use = ranks[0].cpu_use;
  return t;
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

// flag: the option that asked for the peer; python: the interpreter that runs it. The peer runs
// --rounds times, each time after vitpe's steps were timed again (`retime` returns the median
// step in seconds; the first round uses t.step), so each ratio compares two measurements taken
// a minute apart at most, and the median of the rounds' ratios is the figure to quote on a
// machine whose speed drifts. Returns the rounds as JSON (null when the peer did not run).
nlohmann::json vs_torch(const BenchTrainOptions& o, const ModelConfig& config, const StepTimes& t,
                        int threads, const std::string& flag, const std::string& python,
                        const std::function<double()>& retime) {
  if (!torch_peer_shape(config)) {
    std::printf(
        "%s: the PyTorch peer trains the vit-fmnist shape only (pooling and "
        "encoding may differ); skipped\n",
        flag.c_str());
    return nullptr;
  }
  const int64_t B = o.batch;
  std::vector<double> ours, theirs, ratios;
  TorchTrain torch;
  nlohmann::json rounds = nlohmann::json::array();
  for (int r = 0; r < o.rounds; ++r) {
    if (r > 0) {
      std::printf("round %d of %d: timing vitpe's steps again, then the peer\n", r + 1, o.rounds);
      std::fflush(stdout);
    }
    const double step = r == 0 ? t.step : retime();
    torch = run_torch_train_peer(o, config, threads, python);
    if (torch.train_ms <= 0) return nullptr;
    ours.push_back(B / step);
    theirs.push_back(B / (torch.train_ms / 1e3));
    ratios.push_back((torch.train_ms / 1e3) / step);
    rounds.push_back(
        {{"vitpe_img_s", ours.back()}, {"torch_img_s", theirs.back()}, {"ratio", ratios.back()}});
  }
  std::printf("\nPyTorch peer (%s%s): torchvision ViT, %s, learned 1D positions\n",
              torch.version.empty() ? "" : ("torch " + torch.version + ", ").c_str(),
              python.c_str(),
              config.vit().class_token ? "class token (50 tokens)" : "mean pooling (49 tokens)");
  std::printf("\n%-22s %10s %10s %10s\n", "", "vitpe", "torch", "ratio");
  if (o.rounds > 1) {
    for (size_t r = 0; r < ratios.size(); ++r) {
      std::printf("%-22s %10.0f %10.0f %9.2fx\n",
                  fmt::format("round {} train img/s", r + 1).c_str(), ours[r], theirs[r],
                  ratios[r]);
    }
  }
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  const double ratio = median(ratios);
  std::printf(
      "%-22s %10.0f %10.0f %9.2fx%s\n", "train img/s", median(ours), median(theirs), ratio,
      o.rounds > 1
          ? fmt::format(" (median of {} rounds' ratios; {:.2f}-{:.2f})", o.rounds, *lo, *hi).c_str()
          : "");
  std::printf("%-22s %10.0f %10.0f %9.2fx\n", "eval img/s", B / t.eval, torch.eval_img_s,
              (B / t.eval) / torch.eval_img_s);
  if (config.encoding != "learned1d") {
    std::printf("note: the peer uses learned 1D positions; this run used %s\n",
                config.encoding.str().c_str());
  }
  return {{"python", python},      {"torch", torch.version}, {"rounds", rounds},
          {"ratio_median", ratio}, {"ratio_min", *lo},       {"ratio_max", *hi}};
}

// Alone (and phase A under mpirun, on rank 0): the step at the whole batch on this process's
// threads, printed by phase.
StepTimes run_alone(const BenchTrainOptions& o, const ModelConfig& config,
                    const std::string& peers_python) {
  std::unique_ptr<Model> model = make_model(config, 0);
  const int threads = num_threads();
  std::printf("training step: %s (encoding %s), %.2fM parameters, batch %lld, %d threads\n",
              o.model.c_str(), config.encoding.str().c_str(), model->num_params() / 1e6,
              static_cast<long long>(o.batch), threads);
  // --profile reads the linears' and attention's rates against the FMA peak, measured first.
  FmaPeak fma_peak;
  if (o.profile) {
    fma_peak = measure_fma_peak(threads);
    std::printf("%s\n", fma_peak.describe().c_str());
  }
  const Batch batch = random_batch(config, o.batch);
  StepProfile profile;
  StepTimes t = summarise(
      {time_steps(*model, batch, o.batch, self(), o.reps, o.profile ? &profile : nullptr)});
  t.eval = time_eval(*model, batch.images, o.reps);
  print_phases(t, o.batch, 3.0 * model->flops_per_image() * static_cast<double>(o.batch), threads);
  if (o.profile) {
    const double fma = fma_peak.for_onednn();
    std::printf("\nforward + loss:\n");
    t.profile["forward"] =
        profile_table(profile.forward, profile.steps, 1e3 * profile.forward_s / profile.steps,
                      "forward", fma, true);
    std::printf("backward:\n");
    t.profile["backward"] =
        profile_table(profile.backward, profile.steps, 1e3 * profile.backward_s / profile.steps,
                      "backward", fma, true);
    t.profile["fma_peak_gflops_per_s"] = fma;
  }
  auto retime = [&] {
    return summarise({time_steps(*model, batch, o.batch, self(), o.reps)}).step;
  };
  if (o.vs_torch) {
    t.peers["vs_torch"] = vs_torch(o, config, t, threads, "--vs-torch", "/usr/bin/python3", retime);
  }
  if (o.vs_peers) {
    t.peers["vs_peers"] = vs_torch(o, config, t, threads, "--vs-peers", peers_python, retime);
  }
  return t;
}

// The CPUs this process may run on (its affinity mask; all of the node's under --bind-to none).
int affinity_cpus() {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return num_threads();
  return std::max(1, CPU_COUNT(&mine));
}

// Phase B: every rank's samples of the data-parallel step on its rows of the global batch.
struct DataParallel {
  std::vector<RankSamples> ranks;
  StepTimes times;              // of the ranks together
  int64_t gradient_floats = 0;  // what allreduce_gradients sums, on each rank
};

DataParallel time_data_parallel(const BenchTrainOptions& o, const ModelConfig& config,
                                Communicator& comm) {
  std::unique_ptr<Model> model = make_model(config, 0);
  DataParallel dp;
  const int64_t n = comm.size(), r = comm.rank();
  const Batch mine = rows_of(random_batch(config, o.batch), o.batch * r / n, o.batch * (r + 1) / n);
  dp.ranks = gather_samples(comm, time_steps(*model, mine, o.batch, comm, o.reps));
  dp.times = summarise(dp.ranks);
  // After the steps: the gradients exist from the first backward on.
  for (const Param* p : model->params()) dp.gradient_floats += p->grad.numel();
  return dp;
}

// "64", or "63-64" when the ranks differ: a field of every rank.
template <typename Field>
std::string ranks_label(const std::vector<RankSamples>& ranks, Field field) {
  auto lo = field(ranks[0]), hi = lo;
  for (const RankSamples& r : ranks) {
    lo = std::min(lo, field(r));
    hi = std::max(hi, field(r));
  }
  return lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi);
}

// The scaling table: both configurations, the efficiency and the bytes exchanged.
void print_scaling(const StepTimes& alone, int alone_threads, const DataParallel& d,
                   int64_t batch) {
  const auto n = static_cast<int64_t>(d.ranks.size());
  const StepTimes& dp = d.times;
  const std::string one = fmt::format("1 process x {} threads", alone_threads);
  const std::string many = fmt::format(
      "{} ranks x {} threads", n, ranks_label(d.ranks, [](const auto& r) { return r.threads; }));
  auto row = [batch](const std::string& name, const StepTimes& t, bool allreduce) {
    const std::string step =
        fmt::format("{:.1f} ({:.1f}-{:.1f})", t.step * 1e3, t.step_min * 1e3, t.step_max * 1e3);
    std::printf("%-24s %-24s %8.0f %9.1f %9.1f %10s %9.1f\n", name.c_str(), step.c_str(),
                batch / t.step, t.forward * 1e3, t.backward * 1e3,
                allreduce ? fmt::format("{:.2f}", t.allreduce * 1e3).c_str() : "-", t.update * 1e3);
  };
  std::printf("\ndata-parallel scaling, global batch %lld (%s per rank), median of steps:\n",
              static_cast<long long>(batch),
              ranks_label(d.ranks, [](const auto& r) { return r.rows; }).c_str());
  std::printf("%-24s %-24s %8s %9s %9s %10s %9s\n", "configuration", "step ms median (min-max)",
              "img/s", "fwd ms", "bwd ms", "allreduce", "update ms");
  row(one, alone, false);
  row(many, dp, true);
  const double bytes = 4.0 * static_cast<double>(d.gradient_floats);
  std::printf("scaling efficiency: %.2f (img/s of %s / img/s of %s)\n", alone.step / dp.step,
              many.c_str(), one.c_str());
  std::printf(
      "allreduce: %.2f ms for the last rank to arrive in it; the first waited %.2f ms more\n",
      dp.allreduce * 1e3, dp.allreduce_wait * 1e3);
  std::printf(
      "gradients: %.2f MB per rank per step (4 x %lld parameters); ring allreduce traffic "
      "2(N-1)/N x that = %.2f MB sent per rank\n",
      bytes / 1e6, static_cast<long long>(d.gradient_floats),
      bytes * 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) / 1e6);
}

nlohmann::json times_json(const StepTimes& t, int64_t batch) {
  return {{"step_ms", t.step * 1e3},         {"step_ms_min", t.step_min * 1e3},
          {"step_ms_max", t.step_max * 1e3}, {"img_s", batch / t.step},
          {"forward_ms", t.forward * 1e3},   {"backward_ms", t.backward * 1e3},
          {"update_ms", t.update * 1e3},     {"cpu_use", t.cpu_use}};
}

// --json: the run, "one_process" (alone, or phase A) and under mpirun "data_parallel" (phase B)
// with the efficiency and the bytes exchanged.
nlohmann::json bench_json(const BenchTrainOptions& o, const ModelConfig& config,
                          const StepTimes& alone, int alone_threads, const DataParallel* d) {
  nlohmann::json j = {{"model", o.model},
                      {"encoding", config.encoding.str()},
                      {"batch", o.batch},
                      {"reps", o.reps},
                      {"ranks", d ? d->ranks.size() : 1}};
  j["background_load"] = o.background_load;
  j["one_process"] = times_json(alone, o.batch);
  j["one_process"]["threads"] = alone_threads;
  j["one_process"]["eval_ms"] = alone.eval * 1e3;
  j["one_process"]["eval_img_s"] = o.batch / alone.eval;
  if (!alone.profile.is_null()) j["one_process"]["profile"] = alone.profile;
  for (const auto& [flag, peer] : alone.peers.items()) {
    if (!peer.is_null()) j["one_process"][flag] = peer;
  }
  if (!d) return j;
  const StepTimes& dp = d->times;
  nlohmann::json& p = j["data_parallel"] = times_json(dp, o.batch);
  p["allreduce_ms"] = dp.allreduce * 1e3;
  p["allreduce_wait_ms"] = dp.allreduce_wait * 1e3;
  p["threads_per_rank"] = nlohmann::json::array();
  p["batch_per_rank"] = nlohmann::json::array();
  for (const RankSamples& r : d->ranks) {
    p["threads_per_rank"].push_back(r.threads);
    p["batch_per_rank"].push_back(r.rows);
  }
  const auto n = static_cast<double>(d->ranks.size());
  j["scaling_efficiency"] = alone.step / dp.step;
  j["gradient_bytes_per_rank"] = 4 * d->gradient_floats;
  j["ring_allreduce_bytes_per_rank"] =
      4.0 * static_cast<double>(d->gradient_floats) * 2.0 * (n - 1) / n;
  return j;
}

void run_bench_train(const BenchTrainOptions& o) {
  ModelConfig config = apply_overrides(preset(o.model), o.overrides);
  if (!o.encoding.empty()) config.encoding = o.encoding;
  Communicator& comm = world();
  // Before any measurement: a run never times vitpe to find no peers.
  const std::string peers_python =
      o.vs_peers ? require_peers_python(o.peers_python, "bench train") : "";
  // Busy processes for the whole measurement, peers included (started by rank 0 only).
  if (comm.rank() == 0 && o.background_load > 0) {
    std::printf("background load: %d busy process%s beside the measurement\n", o.background_load,
                o.background_load == 1 ? "" : "es");
  }
  std::fflush(stdout);  // before fork: the children must not inherit unwritten output
  const BackgroundLoad load(comm.rank() == 0 ? o.background_load : 0, "bench train");
  if (comm.size() == 1) {
    const StepTimes t = run_alone(o, config, peers_python);
    if (!o.json.empty()) {
      nlohmann::json j = bench_json(o, config, t, num_threads(), nullptr);
      j["background_pids"] = load.pids();  // gone when the command returns (a test checks)
      write_file_atomic(o.json, j.dump(2) + "\n");
      std::printf("wrote %s\n", o.json.c_str());
    }
    return;
  }
  if (o.batch < comm.size()) {
    throw ExitError{2, fmt::format("bench train: --batch {} is fewer images than the {} ranks; "
                                   "give every rank at least one",
                                   o.batch, comm.size())};
  }
  // Phase A: rank 0 alone with every CPU it may use; the others sleep in the barrier.
  const int share = num_threads();  // as main set it: this rank's share, OMP_NUM_THREADS, --threads
  StepTimes alone;
  int alone_threads = 0;
  if (comm.rank() == 0) {
    alone_threads = affinity_cpus();
    set_num_threads(alone_threads);
    std::printf("1 process x %d threads (rank 0 alone; the other ranks wait):\n", alone_threads);
    alone = run_alone(o, config, peers_python);
    set_num_threads(share);
    std::fflush(stdout);
  }
  comm.barrier();
  // Phase B: every rank on its share of the threads and of the batch.
  const DataParallel d = time_data_parallel(o, config, comm);
  if (comm.rank() != 0) return;
  print_scaling(alone, alone_threads, d, o.batch);
  if (!o.json.empty()) {
    nlohmann::json j = bench_json(o, config, alone, alone_threads, &d);
    j["background_pids"] = load.pids();
    write_file_atomic(o.json, j.dump(2) + "\n");
    std::printf("wrote %s\n", o.json.c_str());
  }
}

void add_bench_train(CLI::App& root) {
  CLI::App* bench = find_or_add_subcommand(
      root, "bench", "Benchmarks: a whole model (--model), or a subcommand (ops, attention)");
  auto o = std::make_shared<BenchTrainOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "train",
      "One training step (forward, backward, AdamW) on a random batch, by phase; with "
      "--vs-torch against PyTorch. Under `mpirun -np N --bind-to none` also the data-parallel "
      "step of N ranks with their share of the cores, against 1 process with all of them "
      "(scaling efficiency)");
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
  add_peers_options(cmd, o->vs_peers, o->peers_python,
                    "Also run the PyTorch peer with PyTorch 2.x");
  cmd->add_option("--rounds", o->rounds,
                  "With --vs-torch / --vs-peers: time vitpe and run the peer in turn this many "
                  "times and print the median of the rounds' ratios (a machine's speed drifts)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--background-load", o->background_load,
                  "Run N busy processes beside the measurement (a shared machine), the peer too")
      ->check(CLI::Range(0, 64));
  cmd->add_flag("--profile", o->profile,
                "Also split the forward and the backward by class of op (linear, attention, "
                "layernorm, ...) over --reps more steps, with the linears' and attention's "
                "GFLOP/s against the machine's FMA peak");
  cmd->add_option("--json", o->json,
                  "Also write the times (and under mpirun the scaling) as JSON to this file");
  cmd->callback([o] { run_bench_train(*o); });
}

VITPE_COMMAND(63, "bench", computes, add_bench_train);

}  // namespace
}  // namespace vitpe::app
