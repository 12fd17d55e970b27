// Throughput streams: several forwards of one model at the same time, as OpenVINO's THROUGHPUT
// hint runs them. On a few cores a batch-8 forward keeps every thread busy only part of the time
// (the barriers between ops, the small per-image work of layernorm and attention); N streams of
// T/N threads each, one slice of the batch apiece, overlap those waits.
//
// ModelStreams holds N replicas of a model: the first is the model itself, the others share its
// weight tensors (nothing copied; bf16 and int8 weights are converted once more per replica)
// with activations, buffers, oneDNN primitives (set_compute_stream) and thread count of their
// own. run() splits a batch over the replicas free at that moment, one thread per replica
// beside the caller's, and returns when every slice is done; several threads may call run() on
// one instance at once, each taking the replicas that are free (at least one, waiting for it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "vitpe/vit/models/model.h"

namespace vitpe {

// A model sharing `model`'s weight tensors, with its own activations: its config, extension
// policy and precision are the model's.
std::unique_ptr<Model> share_weights(Model& model);

class ModelStreams {
 public:
  // streams >= 1 replicas of `model` (which must outlive this); threads_per_stream >= 1 compute
  // threads for each replica's forward. Throws std::invalid_argument for counts out of range.
  ModelStreams(Model& model, int streams, int threads_per_stream);
  ModelStreams(const ModelStreams&) = delete;
  ModelStreams& operator=(const ModelStreams&) = delete;

  int streams() const { return static_cast<int>(replicas_.size()); }
  int threads_per_stream() const { return threads_; }

  // Rows [0, batch) cut into contiguous slices, one per replica taken (as many as are free, at
  // most `batch`), each run as f(replica, begin, end) on its own thread with the replica's
  // threads and compute stream. Returns when every slice is done; the first exception a slice
  // throws is rethrown after all have ended. f must write only what belongs to its rows.
  void run(int64_t batch, const std::function<void(Model&, int64_t, int64_t)>& f);

 private:
  struct Replica {
    std::unique_ptr<Model> owned;  // null for the model itself
    Model* model = nullptr;
    int stream = 0;  // its compute stream (set_compute_stream), unique in the process
  };
  std::vector<Replica> replicas_;
  int threads_ = 1;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<size_t> free_;  // indices into replicas_
};

}  // namespace vitpe
