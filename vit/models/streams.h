// Throughput streams: several forwards of one model at the same time, as OpenVINO's THROUGHPUT
// hint runs them. On a few cores a batch-8 forward keeps every thread busy only part of the time
// (the barriers between ops, the small per-image work of layernorm and attention); N streams of
// T/N threads each, one slice of the batch apiece, overlap those waits.
//
// ModelStreams holds N replicas of a model: the first is the model itself, the others share its
// weight tensors (nothing copied; bf16 and int8 weights are converted once more per replica)
// with activations, buffers, oneDNN primitives (set_compute_stream) and thread count of their
// own. run() splits a batch over the replicas free at that moment: the caller runs the first
// slice, each other replica's slice runs on that replica's worker thread, and run() returns when
// every slice is done. The workers live as long as the instance (started on first use), so the
// per-thread state a forward builds -- oneDNN stream, scratch buffers, the OpenMP team -- is built
// once, not per call. Several threads may call run() on one instance at once, each taking the
// replicas that are free (at least one, waiting for it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
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
  // Stops and joins the workers; no run() may be in progress.
  ~ModelStreams();

  int streams() const { return static_cast<int>(replicas_.size()); }
  int threads_per_stream() const { return threads_; }

  // Rows [0, batch) cut into contiguous slices, one per replica taken (as many as are free, at
  // most `batch`), each run as f(replica, begin, end) on its own thread with the replica's
  // threads and compute stream (the first on the calling thread, the others on their replicas'
  // workers; a worker that cannot be started leaves its slice to the caller). Returns when every
  // slice is done; the first exception a slice throws is rethrown after all have ended. f must
  // write only what belongs to its rows.
  void run(int64_t batch, const std::function<void(Model&, int64_t, int64_t)>& f);

 private:
  // A replica's worker: waits for one job at a time (guarded by mutex_).
  struct Worker {
    std::thread thread;
    std::condition_variable wake;
    std::function<void()> job;  // empty while idle
    bool stop = false;
  };
  struct Replica {
    std::unique_ptr<Model> owned;  // null for the model itself
    Model* model = nullptr;
    int stream = 0;  // its compute stream (set_compute_stream), unique in the process
    std::unique_ptr<Worker> worker;  // null until its first slice off the calling thread
  };
  // Hands `job` to replica i's worker (starting it if need be), moving it; false when no
  // worker could be started, the job left with the caller.
  bool post(size_t i, std::function<void()>& job) noexcept;
  void work(Worker& w);

  std::vector<Replica> replicas_;
  int threads_ = 1;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<size_t> free_;  // indices into replicas_
};

}  // namespace vitpe
