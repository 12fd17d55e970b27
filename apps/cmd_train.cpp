// `vitpe train`: trains a model on a dataset (progress bar, metrics.jsonl, atomic checkpoints,
// --resume; data-parallel under mpirun). See vit/train/train.h for the run directory.
#include <cstdio>
#include <filesystem>

#include "apps/command.h"
#include "apps/train_options.h"
#include "ops/ops.h"
#include "vit/train/distributed.h"
#include "vit/train/train.h"

namespace vitpe::app {
namespace {

void add_train(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "Train a model with a positional encoding on a dataset");
  auto o = std::make_shared<TrainOptions>();
  auto cli = std::make_shared<TrainCli>();
  add_train_options(cmd, *o, *cli);
  cmd->add_option("--encoding", o->encoding,
                  "Positional encoding spec (default: the preset's; vitpe encodings list)");
  cmd->add_option("--out", o->out, "Run directory (metrics.jsonl, *.safetensors)")->required();
  cmd->add_flag("--resume", o->resume,
                "Continue the run in --out from its last finished epoch (same settings)");
  cmd->add_flag("--force", o->force, "Replace a run already in --out (else that is an error)")
      ->excludes("--resume");
  cmd->add_option("--stop-after", o->stop_after_epochs,
                  "Stop after this many epochs of this invocation (continue with --resume)");
  cmd->callback([o, cli] {
    finish_train_options(*o, *cli);
    // Under mpirun: data-parallel over the ranks (rank 0 writes --out and prints).
    Communicator& ranks = world();
    if (ranks.size() > 1) o->comm = &ranks;
    TrainResult r = train(*o);
    if (ranks.rank() != 0) return;
    const auto best = std::filesystem::path(o->out) / "best.safetensors";
    if (!r.finished) {
      std::fprintf(stderr, "stopped after epoch %lld of %lld; continue with --resume\n",
                   static_cast<long long>(r.history.empty() ? 0 : r.history.back().epoch),
                   static_cast<long long>(o->epochs));
      return;
    }
    const EpochRecord& last = r.history.back();
    std::printf("%s %s: test accuracy %.2f%% (best %.2f%%), %lld parameters, %s\n",
                r.config.name.c_str(), r.config.encoding.str().c_str(), 100 * last.test_acc,
                100 * r.best_test_acc, static_cast<long long>(r.params),
                Progress::format_duration(r.train_seconds).c_str());
    std::printf("best weights: %s\nmetrics: %s\n", best.string().c_str(),
                (std::filesystem::path(o->out) / "metrics.jsonl").string().c_str());
  });
}

VITPE_COMMAND(40, "train", computes, add_train);

}  // namespace
}  // namespace vitpe::app
