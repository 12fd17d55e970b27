// Training and evaluation of a Model on a Dataset: the loop (AdamW, warmup + cosine, label
// smoothing, gradient clipping), evaluation at the training size and at other sizes, a progress
// bar, metrics as JSON lines, atomic checkpoints and exact resume.
//
// A run directory (TrainOptions::out) holds:
//   metrics.jsonl       one JSON object per line: {"type":"step",...} every log_every steps and
//                       {"type":"epoch",...} after each epoch (train/test loss and accuracy)
//   last.safetensors    model + AdamW state ("optim.m.<name>", "optim.v.<name>") + trainer
//                       state in metadata "vitpe.train": written atomically after every epoch
//   previous.safetensors the last.safetensors before it (one epoch earlier): what --resume
//                       falls back to, saying so, when last.safetensors is damaged
//   model.safetensors   the latest weights, loadable by `vitpe eval` / load_model
//   best.safetensors    the weights with the best test accuracy so far
// Resume works at epoch granularity: a run killed during epoch e restarts at the beginning of e
// from last.safetensors. Data order and augmentation are pure functions of (seed, epoch,
// position) and the model has no other randomness, so the resumed run computes exactly what the
// uninterrupted one does (bitwise, with the same thread count).
//
// Data-parallel (TrainOptions::comm with several ranks, `mpirun -np N vitpe train`): every rank
// holds the whole model and computes the gradient of its part of each batch (the loader's
// shard: the same global batches, order and augmentation as one process), the gradients are
// summed over the ranks (one MPI_Allreduce per step, each rank's loss scaled by its share of
// the batch), and every rank then takes the same clipped AdamW step, so the weights stay
// identical. Evaluation is split the same way and summed. Rank 0 alone owns the run directory
// (lock, metrics, checkpoints); on resume it reads the checkpoint and sends weights, optimizer
// state and trainer state to the others. The same global batch is the same training as one
// process up to the order of float summation (tests/vit/train/mpi_train.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "vit/models/model.h"
#include "vit/train/data.h"
#include "vit/train/distributed.h"
#include "vit/train/optim.h"

namespace vitpe {

// ---- progress bar -------------------------------------------------------------------------------

// "label [=====>    ] 45% 123/270 loss 0.512 acc 81.2% 412 img/s ETA 0:37" on stderr. On a TTY it
// redraws the line in place with \r (at most 10 times a second); otherwise (logs, pipes) it
// prints one line every 10% so logs stay short.
class Progress {
 public:
  Progress(std::string label, int64_t total, FILE* out = stderr, bool enabled = true);
  // done: units finished; text: extra fields (loss, acc); items_per_s: the rate shown.
  void update(int64_t done, const std::string& text, double items_per_s);
  // Prints the final state and a newline.
  void finish(const std::string& text, double items_per_s);
  static std::string format_duration(double seconds);  // "1:02:03" / "2:03"
  // Used by tests: render one line without printing it.
  std::string line(int64_t done, const std::string& text, double items_per_s,
                   double elapsed_s) const;

 private:
  std::string label_;
  int64_t total_;
  FILE* out_;
  bool enabled_, tty_;
  double start_ = 0, last_draw_ = -1;
  int last_decile_ = -1;
};

// ---- evaluation ---------------------------------------------------------------------------------

struct EvalResult {
  double loss = 0;      // mean cross entropy (no smoothing)
  double accuracy = 0;  // in [0, 1]: top-1
  double top5 = 0;      // in [0, 1]: the target among the 5 highest logits (all, below 5 classes)
  int64_t count = 0;
  double seconds = 0;
};

// Evaluates on every sample of `data` (at the dataset's size) in batches. With `comm` of several
// ranks (a collective: every rank calls it), each rank evaluates its part of every batch and
// the totals are summed, so every rank returns the result of the whole set. adaptive_threads:
// batches run on fewer threads while fewer are faster (TrainOptions::adaptive_threads).
// How a dataset's classes meet the model's (timm's --class-map and --valid-labels): dataset
// class i is model class model_class[i] (empty: i itself), and only the model classes in `valid`
// are scored (empty: all), as if the model had those outputs alone.
struct EvalLabels {
  std::vector<int64_t> model_class;
  std::vector<int64_t> valid;
};
EvalResult evaluate(Model& model, const Dataset& data, int64_t batch = 256, bool progress = false,
                    const std::string& label = "eval", Communicator* comm = nullptr,
                    bool adaptive_threads = false, const EvalLabels* labels = nullptr);

// ---- training ----------------------------------------------------------------------------------

// Where a training run is, for TrainOptions::on_progress: after each optimizer step (epoch_done
// null), and after each epoch's evaluation and checkpoint (epoch_done set).
struct EpochRecord;
struct TrainProgress {
  int64_t epoch = 0, epochs = 0;   // 1-based epoch of the step
  int64_t batch = 0, batches = 0;  // 1-based batch within the epoch, of batches per epoch
  int64_t step = 0;                // optimizer steps so far
  double loss = 0, accuracy = 0;   // the epoch's running training loss and accuracy (0..1)
  const EpochRecord* epoch_done = nullptr;
  std::string encoding;  // the run's (TrainOptions::encoding: a comparison's runs differ in it)
  uint64_t seed = 0;
};

struct TrainOptions {
  // Model: a preset, an encoding (empty = the preset's) and JSON overrides of the config
  // ("depth=2", "dim=64"). Image size, channels and classes come from the dataset.
  std::string model = "vit-fmnist";
  std::string encoding;
  std::vector<std::string> overrides;
  // Fine-tuning: start from this checkpoint (ours, timm, torchvision; any family vitpe loads,
  // read with init_heads etc. as `load_model` reads it) instead of a fresh `model`. Its config
  // is the model's, with the encoding, overrides and the dataset's size, channels and classes
  // applied; every tensor that still applies is loaded (init_from below says which).
  std::string init;
  int64_t init_heads = 0;   // for a timm ViT file: its heads (as --heads)
  std::string init_preset;  // for a foreign file: the preset naming its architecture
  bool init_assume_defaults = false;
  // Fine-tuning recipes (any model, with or without --init):
  //   layer_decay  layer-wise learning-rate decay (BEiT; timm's --layer-decay): a parameter of
  //                layer l (Model::param_layers: 0 the embeddings, block i -> i + 1, the final
  //                norm and head depth + 1) learns at the schedule's rate x
  //                layer_decay^(depth + 1 - l). In (0, 1]; 1: off.
  //   freeze       "head": only the head trains (a linear probe); a whole number N: the
  //                embeddings and blocks 0..N-1 are frozen (N at most the depth). Frozen
  //                parameters are never updated, hold no optimizer state, and the backward pass
  //                stops below the lowest trainable layer. Empty: nothing frozen.
  //   head_lr      the head's peak learning rate (0: lr); it follows the same warmup and cosine,
  //                scaled by head_lr / lr (min_lr too), and is not decayed by layer_decay.
  double layer_decay = 1.0;
  std::string freeze;
  double head_lr = 0;

  DatasetOptions data;     // the training split; test split = same with train = false
  int64_t test_limit = 0;  // samples of the test split (0 = all)

  int64_t epochs = 10;
  int64_t batch = 128;
  double lr = 1e-3;
  double min_lr = 1e-5;
  double warmup_epochs = 1.0;  // linear warmup length in epochs (fractional allowed)
  double weight_decay = 0.05;
  float smoothing = 0.1f;
  double clip = 1.0;  // max gradient norm (<= 0: no clipping)
  bool augment = true;
  bool flip = true;   // with augment: horizontal flips where the dataset allows them
  // Multi-resolution batches (FlexiViT / NaViT-style): every training batch resized to one of
  // these square sizes (each a multiple of the model's patch), drawn per batch from the seed
  // (LoaderOptions::sizes); the encodings meet each grid under their native rule, and the test
  // split stays at the training size. Empty: every batch at the training size.
  std::vector<int64_t> train_sizes;
  uint64_t seed = 0;  // model init and data order
  // Time every step (and evaluation batch) and run it on fewer threads while fewer are faster
  // (ops/adaptive_threads.h): on a busy machine a 2-thread step of a small model can take many
  // times its 1-thread time. Results then depend on the count each step used, so a rerun or a
  // resumed run no longer repeats bitwise; the run records the setting and a resumption must
  // use the same. Off by default.
  bool adaptive_threads = false;

  std::string out;         // run directory; empty = no files
  bool resume = false;     // continue from out/last.safetensors when it exists
  bool force = false;      // without resume: replace a run already in `out` (else an error)
  int64_t log_every = 50;  // steps between "step" metric lines
  bool progress = true;    // progress bars on stderr
  bool verbose = true;     // one summary line per epoch on stderr
  int64_t eval_batch = 256;

  // Stop (as if killed) after this many epochs of this invocation (0: never). For tests and
  // for splitting long runs.
  int64_t stop_after_epochs = 0;

  // Data-parallel over these ranks (see the top of this file); null or one rank: alone. Every
  // rank calls train() with the same options; only rank 0 writes `out`.
  Communicator* comm = nullptr;

  // Called on the training thread with where the run is (TrainProgress); empty: nothing. A
  // callback that throws stops the run there, as a kill would: the last finished epoch stays in
  // `out` for --resume. (The Python module reports progress and checks for Ctrl-C through it.)
  std::function<void(const TrainProgress&)> on_progress;
};

struct EpochRecord {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // optimizer steps so far
  double lr = 0;
  double train_loss = 0, train_acc = 0;
  double test_loss = 0, test_acc = 0;
  double seconds = 0;    // wall time of this epoch (training + evaluation)
  double img_per_s = 0;  // training throughput of this epoch
  int64_t ranks = 1;     // data-parallel processes that trained it
};

// An epoch record as JSON (metrics.jsonl lines, last.safetensors' history, results.json) and
// back; the one place that lists its fields.
nlohmann::json epoch_record_json(const EpochRecord& record);
EpochRecord epoch_record_from_json(const nlohmann::json& j);

struct TrainResult {
  ModelConfig config;
  int64_t params = 0;
  std::vector<EpochRecord> history;  // every finished epoch, resumed ones included
  double train_seconds = 0;          // total over all invocations
  double best_test_acc = 0;
  bool finished = false;         // all epochs done (not stopped early)
  std::unique_ptr<Model> model;  // the trained model (final weights)
};

// Sums every parameter's gradient over the ranks of `comm` (a collective: every rank calls it
// with the same parameters), through `flat`, a buffer kept from step to step: the exchange of
// each data-parallel step of train(), and what `vitpe bench train` times under mpirun.
void allreduce_gradients(Communicator& comm, const std::vector<Param*>& params,
                         std::vector<float>& flat);

// Builds the config of a run: preset (or the --init checkpoint's model) + encoding + overrides +
// dataset geometry.
ModelConfig make_train_config(const TrainOptions& options, const Dataset& train_data,
                              const Model* init = nullptr);
// The config train() builds for `options`: make_train_config with the --init checkpoint's model
// when there is one, read as train() reads it.
ModelConfig train_config(const TrainOptions& options, const Dataset& train_data);
// Whether the data is an image folder ("folder", "folder:PATH").
bool is_image_folder(const DatasetOptions& data);
// An image folder is rendered with the model's own preprocessing (timm's transforms from it):
// sets options.data.transform to the evaluation transform of the --init checkpoint's config, or
// of the preset's, with the overrides, at --size where given (else the model's size), and with
// augmentation options.data.random_crop (timm's defaults unless set) for the training split's
// random-resized crops. init: the loaded --init model, or null to load it here when needed.
// Nothing for other datasets, or when a transform is already set (train() calls it; compare
// calls it once for all its runs).
void use_model_transform(TrainOptions& options, const Model* init = nullptr);
// The two transforms use_model_transform chose, as the start of a run prints them ("" for other
// data).
std::string folder_transform_text(const TrainOptions& options);

// FNV-1a (64 bits) of a file's bytes as 16 hex digits: how a run records its --init file.
std::string file_fingerprint(const std::string& path);

// What starting from a checkpoint did with each tensor, by name: loaded as it was, resampled to
// the new grid (position tables at another image size), new (not in the checkpoint, or of
// another shape: a head for other classes, a new encoding's parts), dropped (the checkpoint's
// tensors the model has no place for: the old head, the old encoding's parts).
struct InitReport {
  std::vector<std::string> loaded, resampled, fresh, dropped;
  std::vector<std::string> fresh_why;  // per fresh tensor: "not in the checkpoint", "shape ..."
};
// Copies into `model` (freshly built) every parameter of `source` with its name and shape;
// `source`'s encoding parts are first resampled to `model`'s patch grid when it differs (so a
// learned table at another image size is resampled, as evaluation at that size would).
InitReport init_from(Model& model, Model& source);
// The report as the few lines `train` prints at the start.
std::string init_report_text(const InitReport& r, const std::string& file);

// The fine-tuning recipe on a built model: TrainOptions::freeze as its backward scope (throws
// for a freeze past its depth or an unknown word), then the optimizer: AdamW over the trainable
// parameters, each with its learning-rate scale (layer_decay, head_lr). What train() runs.
AdamW make_optimizer(Model& model, const TrainOptions& options);

// Trains (or resumes) a run. Throws with an actionable message on bad options or files.
TrainResult train(const TrainOptions& options);

// Applies "key=value" overrides to a config through its JSON form; throws naming an unknown key.
ModelConfig apply_overrides(const ModelConfig& config, const std::vector<std::string>& overrides);

}  // namespace vitpe
