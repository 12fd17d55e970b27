// `vitpe compare`: every encoding trained with identical settings and seeds, evaluated at
// several sizes; prints the table and writes results.json, results.csv and report.html.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "apps/command.h"
#include "apps/train_options.h"
#include "ops/util.h"
#include "vit/compare/compare.h"
#include "vit/train/distributed.h"

namespace vitpe::app {

// The settings of `vitpe compare --quick` (a few minutes on 2 cores): a 2-block ViT on the
// procedural relation dataset, where position matters, and five encodings that span the kinds
// (none, learned absolute, fixed 2D, relative bias, rotary). Only fields the user did not set
// change. Also used by `vitpe demo`.
void apply_quick_compare(CompareOptions& o, const std::function<bool(const char*)>& given) {
  TrainOptions& t = o.train;
  if (!given("--dataset")) t.data.name = "procedural";
  if (!given("--encodings"))
    o.encodings = {"none", "learned1d", "sincos2d", "relbias", "rope-mixed"};
  // Patches of 7 px: a 4x4 grid at 28 px, three times fewer tokens than patch 4, and the
  // relation task still needs positions.
  if (!given("--set")) t.overrides = {"patch=7", "depth=2", "dim=64", "heads=4", "mlp_dim=128"};
  // 10 epochs of 10,000 canvases (about 2 minutes for the five encodings): `relbias` only picks
  // up the relation after 3-4 epochs of such a schedule (test 42 % after epoch 3, 93 % after
  // 10); 4 epochs of 2,500 left it at chance, and the demo's table then said a relative bias
  // cannot learn directions, the opposite of the full comparison
  // (docs/results/resolution-studies.md).
  if (!given("--subset")) t.data.limit = 10000;
  if (!given("--test-subset")) t.test_limit = 500;
  if (!given("--epochs")) t.epochs = 10;
  if (!given("--warmup")) t.warmup_epochs = 1;
  if (!given("--batch")) t.batch = 50;
  if (!given("--lr")) t.lr = 2e-3;
  if (!given("--eval-sizes") && t.data.name != "folder") o.sizes = {28, 42, 56};
}

namespace {

// The published resolution studies: every encoding of the ViT study set on a 7x7 patch
// grid at 28 px (patch 4), 5 seeds, evaluated at 44 and 56 px under both extension policies,
// each within a 90-minute budget on 2 cores (checked before the sweep; a plan over it is refused
// with what to cut). Only fields the user did not set change.
//   resolution-procedural: the spatial-relation canvases under every protocol (zoom, canvas,
//     dilute, translate, spread), which tell apart what a larger size changes;
//   resolution-fmnist: Fashion-MNIST upscaled (zoom, the literature's protocol) and on a larger
//     canvas (canvas).
void apply_study(const std::string& study, CompareOptions& o,
                 const std::function<bool(const char*)>& given) {
  TrainOptions& t = o.train;
  const bool procedural = study == "resolution-procedural";
  if (!given("--dataset")) t.data.name = procedural ? "procedural" : "fashion-mnist";
  if (!given("--set")) t.overrides = {"patch=4", "depth=2", "dim=64", "heads=4", "mlp_dim=128"};
  if (!given("--seeds")) o.seeds = {1, 2, 3, 4, 5};
  if (!given("--subset")) t.data.limit = procedural ? 10000 : 20000;
  if (!given("--test-subset")) t.test_limit = procedural ? 1000 : 2000;
  if (!given("--epochs")) t.epochs = procedural ? 10 : 6;
  if (!given("--warmup")) t.warmup_epochs = 1;
  if (!given("--batch")) t.batch = 50;
  if (!given("--lr")) t.lr = 2e-3;
  if (!given("--eval-sizes")) o.sizes = {28, 44, 56};  // multiples of the patch
  if (!given("--policy")) o.policies = {ExtensionPolicy::interpolate, ExtensionPolicy::extrapolate};
  if (!given("--protocol")) {
    o.protocols = procedural
                      ? std::vector<std::string>{"zoom", "canvas", "dilute", "translate", "spread"}
                      : std::vector<std::string>{"zoom", "canvas"};
  }
  if (!given("--budget")) o.budget_minutes = 90;
}

struct CompareCli {
  std::string encodings, seeds = "1", sizes, policies = "native", protocols;
  bool quick = false, no_pictures = false;
  std::string study;
  double success_percent = 0;
};

void add_compare(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "compare", "Train every encoding with identical settings and compare them (HTML report)");
  auto o = std::make_shared<CompareOptions>();
  auto tc = std::make_shared<TrainCli>();
  auto c = std::make_shared<CompareCli>();
  o->train.progress = true;
  add_train_options(cmd, o->train, *tc);
  cmd->add_option("--encodings", c->encodings,
                  "Comma-separated encoding specs (default: all the model supports)");
  cmd->add_option("--seeds", c->seeds, "Comma-separated seeds, one run per encoding and seed")
      ->capture_default_str();
  cmd->add_option("--reference", o->reference,
                  "Encoding the paired differences are taken against (default: the first)");
  cmd->add_option("--eval-sizes", c->sizes,
                  "Comma-separated evaluation sizes, N (N x N) or HxW (e.g. 56x42: 56 rows, 42 "
                  "columns of pixels; every side a multiple of the patch) (default: train size, "
                  "+8, +16)");
  cmd->add_option("--policy", c->policies,
                  std::string("How the encodings meet the other sizes, comma separated: ") +
                      kPolicyWords +
                      ". Every policy is evaluated on the same trained models, one column each")
      ->capture_default_str();
  cmd->add_option("--primary", o->primary,
                  "A pre-declared primary contrast, 'A vs B @ COLUMN' with COLUMN a column's label "
                  "as the tables print it (e.g. 'rope-axial vs learned1d @ 56 zoom extrap'); "
                  "repeatable. The report tests them with Holm's adjustment over this list and "
                  "calls every other difference exploratory")
      ->delimiter(';');
  cmd->add_option("--success-threshold", c->success_percent,
                  "Accuracy in % at or above which a run counts as a success: the report adds "
                  "success rates k/n and the accuracy given success (for bimodal outcomes)");
  cmd->add_flag("--patch-resize", o->patch_resize,
                "Also evaluate each other size with FlexiViT's patch resize: patches of patch x "
                "size / training size pixels (PI-resized embedding) on the trained grid, so the "
                "encoding meets no other grid (one more column per size and protocol; ViT "
                "family; sizes where that patch is not whole are left out)");
  cmd->add_option("--protocol", c->protocols,
                  "How the larger sizes are rendered, comma separated: zoom (the training-size "
                  "image resized), canvas (same-size objects on a larger canvas), dilute (the "
                  "training image in a corner), translate and spread (procedural: same distances "
                  "at new positions; new distances). Default: the dataset's own rule")
      ->check([](const std::string& v) -> std::string {
        for (const std::string& p : split(v, ',')) {
          if (p.empty()) continue;
          try {
            protocol_description(trim(p));
          } catch (const std::invalid_argument& e) {
            return e.what();
          }
        }
        return "";
      });
  cmd->add_option("--init-runs", o->init_runs,
                  "Fine-tune each encoding and seed from its own finished run of an earlier "
                  "comparison in this directory (runs/ENC-sSEED/model.safetensors), e.g. each "
                  "kind's 28 px models for one epoch at 56 px (--size 56 --epochs 1); every run's "
                  "file is checked before training; default --encodings: the earlier ones")
      ->check(CLI::ExistingDirectory)
      ->excludes("--init");
  cmd->add_option("--out", o->out, "Output directory")->required();
  cmd->add_flag("--quick", c->quick,
                "Small run for a demo (procedural data, 2-block ViT, a few minutes on 2 cores)");
  cmd->add_flag("--no-pictures", c->no_pictures, "Leave the encoding pictures out of the report");
  cmd->add_option("--study", c->study,
                  "A published study's settings (flags given still win): resolution-procedural "
                  "(every protocol and policy on the relation canvases) or resolution-fmnist "
                  "(Fashion-MNIST upscaled and on a larger canvas); 5 seeds, 90-minute budget")
      ->check(CLI::IsMember({"resolution-procedural", "resolution-fmnist"}));
  cmd->add_option("--budget", o->budget_minutes,
                  "Refuse a plan estimated to take longer than this many minutes, saying what to "
                  "cut (measured before the sweep: one real epoch and a few steps per encoding; "
                  "0: no limit)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->callback([cmd, o, tc, c] {
    finish_train_options(o->train, *tc);
    o->encodings.clear();
    for (const std::string& e : split(c->encodings, ',')) {
      if (!e.empty()) o->encodings.push_back(e);
    }
    o->seeds.clear();
    for (int64_t s : parse_whole_list(c->seeds, "--seeds", 0, int64_t{1} << 53)) {
      o->seeds.push_back(static_cast<uint64_t>(s));
    }
    // "56" (square) or "56x42" (rows x cols), comma separated.
    o->sizes.clear();
    o->size_cols.clear();
    std::stringstream items(c->sizes);
    for (std::string item; std::getline(items, item, ',');) {
      if (item.empty()) continue;
      const size_t x = item.find('x');
      o->sizes.push_back(parse_whole(item.substr(0, x), "--eval-sizes", 1, 16384));
      o->size_cols.push_back(
          x == std::string::npos ? 0 : parse_whole(item.substr(x + 1), "--eval-sizes", 1, 16384));
    }
    o->policies = parse_policy_list(c->policies, "--policy");
    if (!(c->success_percent >= 0 && c->success_percent <= 100)) {
      throw ExitError{2, "--success-threshold: expected an accuracy in 0..100 %, found " +
                             std::to_string(c->success_percent)};
    }
    o->success_threshold = c->success_percent / 100;
    o->protocols.clear();
    for (const std::string& p : split(c->protocols, ',')) {
      if (!trim(p).empty() &&
          std::find(o->protocols.begin(), o->protocols.end(), trim(p)) == o->protocols.end())
        o->protocols.push_back(trim(p));
    }
    o->pictures = !c->no_pictures;
    auto given = [&](const char* name) { return cmd->get_option(name)->count() > 0; };
    if (c->quick && !c->study.empty()) {
      throw ExitError{2, "--quick and --study are two sets of settings: give one"};
    }
    if (c->quick) apply_quick_compare(*o, given);
    if (!c->study.empty()) apply_study(c->study, *o, given);
    o->extra_settings = {{"command", utf8_safe(invocation())}};  // the report's JSON: UTF-8
    // Under mpirun: the runs are shared out over the ranks; rank 0 writes and prints.
    Communicator& ranks = world();
    if (ranks.size() > 1) {
      o->comm = &ranks;
      o->extra_settings.emplace_back("processes", std::to_string(ranks.size()) + " MPI ranks, " +
                                                      std::to_string(num_threads()) +
                                                      " threads each (rank 0)");
    }
    CompareResults r = run_compare(*o);
    if (ranks.rank() != 0) return;
    std::printf("\n%s\n", terminal_table(r).c_str());
    const auto out = std::filesystem::path(o->out);
    std::printf("report:  %s\nresults: %s, %s\n", (out / "report.html").string().c_str(),
                (out / "results.json").string().c_str(), (out / "results.csv").string().c_str());
  });
}

VITPE_COMMAND(42, "compare", computes, add_compare);

}  // namespace
}  // namespace vitpe::app
