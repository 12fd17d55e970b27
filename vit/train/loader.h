// Batches from a Dataset, produced by a background thread while the model computes.
//
// Order and augmentation are pure functions of (seed, epoch, position): the permutation of an
// epoch comes from Rng(mix_seed(seed, epoch)), and sample j of the epoch is augmented with
// Rng(mix_seed(seed, epoch, j)). So the same seed gives the same batches however the threads
// are scheduled, and a resumed run at epoch e sees exactly the batches of an uninterrupted one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ops/tensor.h"
#include "vit/train/data.h"

namespace vitpe {

struct LoaderOptions {
  int64_t batch = 128;
  bool shuffle = true;
  bool drop_last = true;  // training keeps every batch the same shape
  bool augment = false;   // random crop with the dataset's padding, flips where allowed (a
                          // dataset that augments_itself: its own transform)
  bool flip = true;       // with augment: horizontal flips (where the dataset allows them)
  // With augment, for a dataset that does not augment itself: scale augmentation, a random-
  // resized crop of the rendered sample (timm's box rule, sample_crop_box) resized back to the
  // sample's size bilinearly (resized_crop_planes), in place of the padded crop.
  std::optional<RandomResizedCrop> zoom;
  // Multi-resolution batches (FlexiViT / NaViT-style training): each training batch is resized
  // to one of these square sizes, drawn per batch from (seed, epoch, batch) alone, so every
  // shard of a batch and a resumed run draw the same; every sample is made as without them
  // (augmented at the dataset's size) and then resampled bilinearly with antialiasing
  // (ops/resample.h), as timm's transforms resize tensors. Empty: the dataset's size.
  std::vector<int64_t> sizes;
  uint64_t seed = 0;
  int prefetch = 4;  // batches produced ahead of the consumer
  // Data-parallel ranks: this loader produces part `shard` of `shards` of every batch, the
  // positions [len * shard / shards, len * (shard + 1) / shards) of each batch of length len.
  // Order and augmentation still come from the global position, so the parts of all shards
  // are exactly the batches one loader makes. A part with no sample (the last batch of an
  // evaluation shorter than `shards`) is skipped.
  int shard = 0, shards = 1;
};

class Loader {
 public:
  Loader(const Dataset& data, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Batches of the whole epoch (of every shard together; a shard may skip an empty last part).
  int64_t batches_per_epoch() const;
  // Starts producing the batches of `epoch` (any previous epoch is abandoned).
  void start_epoch(int64_t epoch);
  // images: [B, C, H, W] (reallocated only when the shape changes: B, or H = W with `sizes`),
  // labels: B entries. Returns false after the last batch of the epoch. Rethrows an error of the
  // producer thread.
  bool next(Tensor& images, std::vector<int32_t>& labels);
  // The side batch b of `epoch` is resized to with `sizes` (0 without: the dataset's size).
  int64_t batch_size_px(int64_t epoch, int64_t b) const;

  // One augmented sample as the loader makes it (for tests and pictures): position j of the
  // epoch's order reads dataset index `index`.
  int32_t make_sample(int64_t epoch, int64_t j, int64_t index, float* image) const;
  // The dataset indices of an epoch in order.
  std::vector<int64_t> order(int64_t epoch) const;

 private:
  struct Batch {
    std::vector<float> images;
    std::vector<int32_t> labels;
    int64_t rows = 0, cols = 0;
  };
  void produce(int64_t epoch);
  void stop();

  const Dataset& data_;
  LoaderOptions opt_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool done_ = false;    // producer finished the epoch
  bool cancel_ = false;  // consumer abandoned the epoch
  std::exception_ptr error_;
};

}  // namespace vitpe
