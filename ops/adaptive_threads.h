// Adaptive thread counts: fewer compute threads when the machine is busy and fewer are faster.
//
// The CPU ops run on OpenMP (ours and oneDNN's), whose parallel regions split their work evenly
// and end at a barrier. When another process takes part of a core, the thread sharing that core
// finishes its share late and the other waits for it at every barrier: on a 2-core machine with
// one busy process beside it, a 2-thread ViT-S forward took 3.4x its quiet time and 1.8x its own
// 1-thread time. Nothing inside one call can see that; the calls' wall times can.
//
// AdaptiveThreads times each call of a workload (a key: a model at one input shape, say) and
// picks the thread count that is fastest now among the caller's count T and its halvings
// (T, T/2, ..., 1):
// - It starts at T. Every so often it probes the next count down (and, when below T, the next
//   up): two calls there, after one warm-up call the first time a count is used (it builds
//   oneDNN primitives). It moves when the probe's mean time is below 0.97x (fewer threads) or
//   0.9x (more threads) the mean of the current count's last two calls, so counts within noise
//   of each other settle on the fewer, which also leaves cores to the machine's other work; a
//   probe whose first timed call takes over 1.25x that mean has lost at once (a quiet machine
//   pays one slow call per probe, not two); a probe that loses is retried after twice as many
//   calls (4, 8, ... up to 128), one that wins resets the interval of the count it left.
// - A current count whose last two calls both took over 1.3x its typical time (a slow average)
//   probes the next count down at once (at most every 4 calls): load that starts mid-run is
//   answered within a few calls, while noise of +-20 % does not set it off.
// On a quiet machine the cost is one slow call every 128 calls once settled (under 1 %).
//
// Numbers: oneDNN's matmuls may split sums differently at another thread count, so results can
// differ in the last bits from call to call. Inference tolerates that; training that must
// repeat bitwise (a resumed run) keeps a fixed count (the trainer does not use this).
//
// Threads: one instance may be shared by several threads; each call is timed on its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "ops/ops.h"  // adaptive_threads_default

namespace vitpe {

class AdaptiveThreads {
 public:
  explicit AdaptiveThreads(bool enabled = adaptive_threads_default()) : enabled_(enabled) {}

  // One timed call of workload `key`: sets the calling thread's compute threads (num_threads())
  // to the count chosen for it and restores the count before on destruction, recording the
  // call's wall time unless it ends by an exception. Disabled, it changes nothing.
  class Call {
   public:
    Call(AdaptiveThreads& owner, uint64_t key);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    int threads() const { return threads_; }

   private:
    AdaptiveThreads& owner_;
    uint64_t key_;
    int before_ = 0;     // the caller's thread count, restored at the end
    int threads_ = 0;    // the count this call runs with
    int level_ = -1;     // its index among the counts tried (T, T/2, ...); -1: disabled
    int exceptions_ = 0;
    std::chrono::steady_clock::time_point start_;
  };

  // Calls per thread count over every key.
  std::map<int, int64_t> calls_per_count() const;
  // The count the next call of `key` would use (the caller's count for an unseen key).
  int current_threads(uint64_t key) const;

  // Calls of `key` whose time was recorded (not those that ended by an exception).
  int64_t recorded_calls(uint64_t key) const;

  // The decision rule on its own, for tests: level 0 is the top count.
  struct Level {
    int threads = 1;
    int64_t runs = 0;         // calls at this count (the first is a warm-up and not timed)
    double last[2] = {0, 0};  // the last two timed calls, seconds (last[1] the newest)
    int64_t timed = 0;        // timed calls since the current probe or stay began
    double typical = 0;       // a slow average of its timed calls (0: none yet)
    int64_t interval = 4;     // calls before this count is probed again after losing
    int64_t next_probe = 0;   // the call index at which to probe it
  };
  struct State {
    int top = 0;  // the caller's count these levels were made for
    std::vector<Level> levels;
    int current = 0;
    int probing = -1;  // the level being probed, or -1
    int64_t calls = 0;
    int64_t last_trigger = -100;
  };
  // The level the next call runs at.
  static int next_level(const State& s);
  // Records a call of `seconds` at `level` and decides what comes next.
  static void record(State& s, int level, double seconds);
  static State make_state(int top);

 private:
  const bool enabled_;
  mutable std::mutex mutex_;
  std::map<uint64_t, State> states_;
  std::map<int, int64_t> counts_;
};

}  // namespace vitpe
