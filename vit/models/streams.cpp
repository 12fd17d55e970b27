// Throughput streams (see streams.h).
#include "vit/models/streams.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

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
                             " in the model and " + to[i]->name + " " + to[i]->value.shape().str() +
                             " in the replica");
    }
    to[i]->value = from[i]->value;  // the same storage
  }
  out->set_extension_policy(model.extension_policy());
  out->share_precision(model);  // the converted weights too
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

ModelStreams::~ModelStreams() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Replica& r : replicas_)
      if (r.worker) r.worker->stop = true;
  }
  for (Replica& r : replicas_) {
    if (!r.worker) continue;
    r.worker->wake.notify_all();
    if (r.worker->thread.joinable()) r.worker->thread.join();
  }
}

void ModelStreams::work(Worker& w) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    w.wake.wait(lock, [&] { return w.stop || static_cast<bool>(w.job); });
    if (w.stop) return;
    std::function<void()> job = std::move(w.job);
    w.job = nullptr;
    lock.unlock();
    job();  // never throws: run() wraps every slice
    lock.lock();
  }
}

bool ModelStreams::post(size_t i, std::function<void()>& job) noexcept {
  Replica& r = replicas_[i];
  std::lock_guard<std::mutex> lock(mutex_);
  if (!r.worker) {
    try {
      auto w = std::make_unique<Worker>();
      w->thread = std::thread([this, p = w.get()] { work(*p); });
      r.worker = std::move(w);
    } catch (...) {  // no memory or no thread now: the caller runs it, a later call tries again
      return false;
    }
  }
  r.worker->job = std::move(job);
  r.worker->wake.notify_one();
  return true;
}

void ModelStreams::run(int64_t batch, const std::function<void(Model&, int64_t, int64_t)>& f) {
  if (batch <= 0) return;
  // Everything allocated before the replicas are taken: from then on nothing may throw until
  // they are free again and every posted slice has ended.
  std::vector<size_t> mine, own;
  mine.reserve(replicas_.size());
  own.reserve(replicas_.size());
  std::vector<std::exception_ptr> errors(replicas_.size());
  {
    std::unique_lock<std::mutex> lock(mutex_);
    freed_.wait(lock, [&] { return !free_.empty(); });
    const size_t n = std::min<size_t>(free_.size(), static_cast<size_t>(batch));
    mine.assign(free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
    free_.resize(free_.size() - n);
  }
  const size_t n = mine.size();
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
  // The slices handed to workers count down `pending`; the caller runs slice 0 and any slice
  // no worker took, then waits for the rest.
  std::mutex done_mutex;
  std::condition_variable done;
  size_t pending = 0;
  for (size_t i = 1; i < n; ++i) {
    {
      std::lock_guard<std::mutex> lock(done_mutex);
      ++pending;
    }
    bool posted = false;
    try {
      std::function<void()> job = [&, i] {
        slice(i);
        std::lock_guard<std::mutex> lock(done_mutex);
        if (--pending == 0) done.notify_one();
      };
      posted = post(mine[i], job);
    } catch (...) {  // no memory for the job: the caller runs the slice
    }
    if (!posted) {
      std::lock_guard<std::mutex> lock(done_mutex);
      --pending;
      own.push_back(i);
    }
  }
  slice(0);
  for (size_t i : own) slice(i);
  {
    std::unique_lock<std::mutex> lock(done_mutex);
    done.wait(lock, [&] { return pending == 0; });
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
