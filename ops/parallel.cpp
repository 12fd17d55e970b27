// The thread pool behind parallel_for (see parallel.h for the contract and why it exists).
//
// One job at a time, described by plain fields (fn, ctx, n, chunk) and one atomic 64-bit word:
//   bits  0-15  next chunk to claim
//   bits 16-31  number of chunks
//   bits 32-47  number of participants (caller + workers with index below it take part)
// A thread claims chunk i by a compare-and-swap of the whole word from (next = i) to i + 1, and
// reads the job's fields only after that succeeds. The owner writes the fields of a new job only
// after every chunk of the previous one has finished, and publishes them with a release store of
// the word; so a claim always sees the fields of the job it claimed from, whatever its thread saw
// before (a stale value cannot claim: the compare-and-swap compares the whole word).
#include "ops/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "ops/ops.h"

namespace vitpe {

namespace {

// How long an idle worker polls for the next job before it sleeps, and how long a caller polls
// for other threads' chunks before it sleeps. A ViT forward's regions are microseconds apart, so
// a quiet machine never pays a wake-up; a busy one gets the core back soon.
constexpr auto kWorkerSpin = std::chrono::microseconds(100);
constexpr auto kCallerSpin = std::chrono::microseconds(50);
constexpr int64_t kMaxChunks = 0xffff;
constexpr int kMaxThreads = 0xffff;

constexpr uint64_t next_of(uint64_t w) { return w & 0xffff; }
constexpr uint64_t chunks_of(uint64_t w) { return (w >> 16) & 0xffff; }
constexpr uint64_t threads_of(uint64_t w) { return (w >> 32) & 0xffff; }
constexpr uint64_t make_word(uint64_t next, uint64_t chunks, uint64_t threads) {
  return next | (chunks << 16) | (threads << 32);
}
// Whether the participant with this index may claim a chunk of the job in word w.
constexpr bool claimable(uint64_t w, uint64_t index) {
  return next_of(w) < chunks_of(w) && index < threads_of(w);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls pred() for up to `limit`; true as soon as it holds.
template <class Pred>
bool spin_until(Pred pred, std::chrono::microseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() - start > limit) return pred();
  }
}

thread_local int t_index = 0;         // pool_thread_index()
thread_local bool t_in_task = false;  // inside a chunk (or a worker): nested calls run inline

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      stop_ = true;
    }
    wake_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  // True when the calling thread now owns the pool (until release()).
  bool try_acquire() { return !busy_.exchange(true, std::memory_order_acquire); }
  void release() { busy_.store(false, std::memory_order_release); }

  int workers() {
    std::lock_guard<std::mutex> lock(wake_mu_);
    return static_cast<int>(workers_.size());
  }

  // Owner only: runs a job of `chunks` chunks with `threads` participants and returns when all
  // chunks are done, rethrowing the first exception of fn.
  void run(int64_t n, int64_t chunk, int64_t chunks, int threads, RangeFn fn, void* ctx) {
    grow(threads - 1);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    chunk_ = chunk;
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    finished_.store(0, std::memory_order_relaxed);
    word_.store(make_word(0, static_cast<uint64_t>(chunks), static_cast<uint64_t>(threads)),
                std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      // Taking the lock orders this wake-up after a worker's last look at the word (see sleep).
      std::lock_guard<std::mutex> lock(wake_mu_);
      wake_cv_.notify_all();
    }
    work(0);
    wait_finished(static_cast<uint64_t>(chunks));
    if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
  }

 private:
  void grow(int wanted) {
    if (static_cast<int>(workers_.size()) >= wanted) return;
    std::lock_guard<std::mutex> lock(wake_mu_);
    while (static_cast<int>(workers_.size()) < wanted) {
      const int index = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, index] { worker_main(index); });
    }
  }

  // Claims and runs chunks of the current job until none is left for `index`.
  void work(int index) {
    uint64_t w = word_.load(std::memory_order_acquire);
    while (claimable(w, static_cast<uint64_t>(index))) {
      if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        continue;  // w now holds the current word
      }
      run_chunk(static_cast<int64_t>(next_of(w)), chunks_of(w));
      w = word_.load(std::memory_order_acquire);
    }
  }

  void run_chunk(int64_t c, uint64_t chunks) {
    if (!failed_.load(std::memory_order_relaxed)) {
      const int64_t begin = c * chunk_, end = std::min(n_, begin + chunk_);
      try {
        fn_(ctx_, begin, end);
      } catch (...) {
        if (!failed_.exchange(true, std::memory_order_acq_rel)) error_ = std::current_exception();
      }
    }
    // The last chunk wakes the caller if it went to sleep (see wait_finished).
    if (finished_.fetch_add(1, std::memory_order_seq_cst) + 1 == chunks &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_cv_.notify_one();
    }
  }

  void wait_finished(uint64_t chunks) {
    auto done = [&] { return finished_.load(std::memory_order_acquire) == chunks; };
    if (spin_until(done, kCallerSpin)) return;
    std::unique_lock<std::mutex> lock(done_mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    while (finished_.load(std::memory_order_seq_cst) != chunks) done_cv_.wait(lock);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }

  void worker_main(int index) {
    // oneDNN and any OpenMP loop inside a chunk stay on this thread.
    omp_set_num_threads(1);
    t_index = index;
    t_in_task = true;
    const auto has_work = [&] {
      return claimable(word_.load(std::memory_order_acquire), static_cast<uint64_t>(index));
    };
    for (;;) {
      work(index);
      if (spin_until(has_work, kWorkerSpin)) continue;
      std::unique_lock<std::mutex> lock(wake_mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (!stop_ &&
             !claimable(word_.load(std::memory_order_seq_cst), static_cast<uint64_t>(index))) {
        wake_cv_.wait(lock);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (stop_) return;
    }
  }

  // The job (written by the owner between jobs, read by claimers; see the file comment).
  RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> word_{0};
  std::atomic<uint64_t> finished_{0};

  std::atomic<bool> busy_{false};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::mutex wake_mu_;  // guards workers_, stop_; pairs with wake_cv_
  std::condition_variable wake_cv_;
  bool stop_ = false;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void parallel_for_fn(int64_t n, int64_t grain, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = std::min(t_in_task ? 1 : num_threads(), kMaxThreads);
  const int64_t chunk = std::max(grain, (n + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (threads <= 1 || chunks <= 1) {
    fn(ctx, 0, n);
    return;
  }
  Pool& p = pool();
  if (!p.try_acquire()) {
    fn(ctx, 0, n);  // another thread's job holds the pool: ours runs on this thread
    return;
  }
  // The caller is participant 0; its OpenMP thread count is 1 inside chunks, as a worker's. The
  // guard gives the pool back and restores the count however run() ends.
  struct Owner {
    Pool& pool;
    int omp_before = omp_get_max_threads();
    explicit Owner(Pool& p) : pool(p) {
      omp_set_num_threads(1);
      t_in_task = true;
    }
    ~Owner() {
      t_in_task = false;
      omp_set_num_threads(omp_before);
      pool.release();
    }
  } owner(p);
  p.run(n, chunk, chunks, static_cast<int>(std::min<int64_t>(threads, chunks)), fn, ctx);
}

int pool_thread_index() { return t_index; }

int pool_workers() { return pool().workers(); }

}  // namespace vitpe
