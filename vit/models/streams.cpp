// Throughput streams (see streams.h).
#include "vit/models/streams.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "ops/ops.h"

namespace vitpe {

std::unique_ptr<Model> share_weights(Model& model) {
  std::unique_ptr<Model> out = make_model(model.config(), 0);
  const std::vector<Param*> from = model.params(), to = out->params();
  if (from.size() != to.size()) {
    throw std::logic_error("share_weights: the replica has " + std::to_string(to.size()) +
                           " parameters, the model " + std::to_string(from.size()));
  }
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i]->name != to[i]->name || from[i]->value.shape() != to[i]->value.shape()) {
      throw std::logic_error("share_weights: parameter " + std::to_string(i) + " is " +
                             from[i]->name + " " + from[i]->value.shape().str() +
                             " in the model and " + to[i]->name + " " +
                             to[i]->value.shape().str() + " in the replica");
    }
    to[i]->value = from[i]->value;  // the same storage
  }
  out->set_extension_policy(model.extension_policy());
  out->set_precision(model.precision());
  return out;
}

namespace {
// Compute streams unique in the process: two ModelStreams never share one (0 is every thread's
// own until set).
std::atomic<int> g_next_stream{1};

// Sets the calling thread's compute threads and stream for one slice, and restores them.
class StreamScope {
 public:
  StreamScope(int threads, int stream) : threads_(num_threads()), stream_(compute_stream()) {
    set_num_threads(threads);
    set_compute_stream(stream);
  }
  ~StreamScope() {
    set_num_threads(threads_);
    set_compute_stream(stream_);
  }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  int threads_, stream_;
};
}  // namespace

ModelStreams::ModelStreams(Model& model, int streams, int threads_per_stream)
    : threads_(threads_per_stream) {
  if (streams < 1 || streams > 64) {
    throw std::invalid_argument("streams: expected 1 to 64 concurrent forwards, found " +
                                std::to_string(streams));
  }
  if (threads_per_stream < 1 || threads_per_stream > 1024) {
    throw std::invalid_argument("streams: expected 1 to 1024 threads per stream, found " +
                                std::to_string(threads_per_stream));
  }
  for (int i = 0; i < streams; ++i) {
    Replica r;
    if (i > 0) r.owned = share_weights(model);
    r.model = i > 0 ? r.owned.get() : &model;
    r.stream = g_next_stream.fetch_add(1);
    replicas_.push_back(std::move(r));
    free_.push_back(static_cast<size_t>(i));
  }
}

void ModelStreams::run(int64_t batch, const std::function<void(Model&, int64_t, int64_t)>& f) {
  if (batch <= 0) return;
  std::vector<size_t> mine;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    freed_.wait(lock, [&] { return !free_.empty(); });
    const size_t n = std::min<size_t>(free_.size(), static_cast<size_t>(batch));
    mine.assign(free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
    free_.resize(free_.size() - n);
  }
  const size_t n = mine.size();
  std::vector<std::exception_ptr> errors(n);
  auto slice = [&](size_t i) {
    const int64_t begin = batch * static_cast<int64_t>(i) / static_cast<int64_t>(n);
    const int64_t end = batch * static_cast<int64_t>(i + 1) / static_cast<int64_t>(n);
    try {
      const Replica& r = replicas_[mine[i]];
      StreamScope scope(threads_, r.stream);
      f(*r.model, begin, end);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < n; ++i) {
    try {
      helpers.emplace_back(slice, i);
    } catch (...) {  // no thread: the caller runs that slice itself after its own
      helpers.emplace_back();
    }
  }
  slice(0);
  for (size_t i = 1; i < n; ++i) {
    if (helpers[i - 1].joinable()) {
      helpers[i - 1].join();
    } else {
      slice(i);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.insert(free_.end(), mine.begin(), mine.end());
  }
  freed_.notify_all();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace vitpe
