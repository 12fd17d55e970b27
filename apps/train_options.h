// Command-line options shared by `vitpe train` and `vitpe compare` (model, data, schedule).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "apps/command.h"
#include "ops/ops.h"
#include "vit/compare/compare.h"
#include "vit/train/train.h"

namespace vitpe::app {

// Options parsed into other types than TrainOptions' own.
struct TrainCli {
  int64_t size = 0;
  bool no_augment = false;
  bool no_flip = false;
  bool no_progress = false;
  std::vector<double> scale, ratio;  // an image folder's random-resized crop (timm's flags)
  std::string train_sizes;           // "20,28,36": multi-resolution batches
};

inline void add_train_options(CLI::App* cmd, TrainOptions& o, TrainCli& c) {
  CLI::Option* model = cmd->add_option("--model", o.model, preset_help())->capture_default_str();
  cmd->add_option("--init", o.init,
                  "Fine-tune: start from this checkpoint (ours, timm, torchvision) instead of a "
                  "fresh --model; a head for other classes, a new --encoding's parts and tables "
                  "at another size are made new or resampled, and the start lists which")
      ->check(CLI::ExistingFile)
      ->excludes(model);
  cmd->add_option("--init-heads", o.init_heads,
                  "With --init of a timm ViT file: its attention heads (not stored in the file)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--init-preset", o.init_preset,
                  "With --init of a foreign file: the preset naming its architecture");
  cmd->add_option("--layer-decay", o.layer_decay,
                  "Fine-tune: layer-wise learning-rate decay F in (0, 1] (BEiT, timm): block i "
                  "learns at the rate x F^(depth - i), the embeddings at x F^(depth + 1), the "
                  "final norm and head at the rate itself; 1: off")
      ->capture_default_str();
  cmd->add_option("--freeze", o.freeze,
                  "Fine-tune with a frozen bottom: 'head' trains the head alone (a linear probe); "
                  "N freezes the embeddings and blocks 0..N-1. Frozen layers get no update and "
                  "no backward pass");
  cmd->add_option("--head-lr", o.head_lr,
                  "Fine-tune: the head's peak learning rate, on the same warmup and cosine (0: "
                  "--lr)")
      ->capture_default_str();
  cmd->add_option("--set", o.overrides,
                  "Override a config field of the preset, key=value (e.g. depth=2); repeatable");
  cmd->add_option("--dataset", o.data.name,
                  "fashion-mnist, procedural (spatial relations), quadrant (absolute-position "
                  "probe), or folder:PATH")
      ->capture_default_str();
  cmd->add_option("--data-dir", o.data.dir,
                  "Data directory (fashion-mnist default /usr/share/datasets/fashion-mnist)");
  cmd->add_option("--subset", o.data.limit, "Use the first N training samples (0: all)");
  cmd->add_option("--test-subset", o.test_limit, "Use the first N test samples (0: all)");
  cmd->add_option("--size", c.size, "Training image size in pixels (0: the dataset's own)");
  cmd->add_option("--data-seed", o.data.seed, "Seed of the procedural dataset")
      ->capture_default_str();
  cmd->add_option("--epochs", o.epochs, "Epochs")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", o.min_lr, "Final learning rate of the cosine decay")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup_epochs, "Linear warmup length in epochs")
      ->capture_default_str();
  cmd->add_option("--wd", o.weight_decay, "AdamW weight decay (not on norms, biases, positions)")
      ->capture_default_str();
  cmd->add_option("--smoothing", o.smoothing, "Label smoothing")->capture_default_str();
  cmd->add_option("--clip", o.clip, "Max gradient norm (0: off)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of initialisation, data order and augmentation")
      ->capture_default_str();
  cmd->add_option("--scale", c.scale,
                  "The random-resized crop's range of area shares, MIN MAX (timm's --scale): an "
                  "image folder's decoded photos are always cropped so (default 0.08 1); other "
                  "datasets' samples with it only (scale augmentation, zooms of up to "
                  "1/sqrt(MIN), in place of their padded crops)")
      ->expected(2);
  cmd->add_option("--ratio", c.ratio,
                  "The random-resized crop's range of aspect ratios (width / height), MIN MAX "
                  "(timm's --ratio; default 0.75 1.333)")
      ->expected(2);
  cmd->add_option("--train-sizes", c.train_sizes,
                  "Multi-resolution batches, comma separated square sizes (e.g. 20,28,36; each "
                  "a multiple of the patch): every training batch is resized to one of them, "
                  "drawn per batch from the seed, as FlexiViT and NaViT train; the test split "
                  "stays at the training size");
  cmd->add_flag("--no-augment", c.no_augment,
                "No random crops or flips (an image folder: the evaluation transform)");
  cmd->add_flag("--no-flip", c.no_flip, "Random crops only, no horizontal flips")
      ->excludes("--no-augment");
  cmd->add_option("--log-every", o.log_every, "Steps between step lines in metrics.jsonl")
      ->capture_default_str();
  cmd->add_flag("--no-progress", c.no_progress, "No progress bars");
  cmd->add_flag("--adaptive-threads", o.adaptive_threads,
                "Run steps on fewer threads while fewer are faster (a busy machine); the results "
                "then no longer repeat bitwise, and --resume needs the same setting");
  add_threads_option(cmd);
}

inline void finish_train_options(TrainOptions& o, TrainCli& c) {
  o.data.rows = o.data.cols = c.size;
  o.augment = !c.no_augment;
  o.flip = !c.no_flip;
  o.progress = !c.no_progress;
  if (!c.train_sizes.empty()) o.train_sizes = parse_whole_list(c.train_sizes, "--train-sizes", 1, 4096);
  if (!c.scale.empty() || !c.ratio.empty()) {
    RandomResizedCrop crop;
    if (!c.scale.empty()) {
      crop.scale_min = c.scale[0];
      crop.scale_max = c.scale[1];
    }
    if (!c.ratio.empty()) {
      crop.ratio_min = c.ratio[0];
      crop.ratio_max = c.ratio[1];
    }
    o.data.random_crop = crop;
  }
}

// The settings of `vitpe compare --quick`, applied to the fields for which given(option name)
// is false (defined in cmd_compare.cpp; `vitpe demo` uses it too).
void apply_quick_compare(CompareOptions& o, const std::function<bool(const char*)>& given);

}  // namespace vitpe::app
