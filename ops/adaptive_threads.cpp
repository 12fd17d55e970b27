// Adaptive thread counts (ops/adaptive_threads.h): the decision rule and the timed call.
#include "ops/adaptive_threads.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>

#include "ops/ops.h"

namespace vitpe {

namespace {

// A probe is taken when its mean time is below this fraction of the current count's: fewer
// threads need only be 3 % faster (they also leave the cores to the machine's other work), more
// threads must be 10 % faster, so two counts within noise of each other settle on the fewer.
constexpr double kWinFewer = 0.97;
constexpr double kWinMore = 0.9;
constexpr double kSlower = 1.3;     // a current count this much slower than usual probes down
// A probe whose first timed call is this much slower than the current count's mean has lost
// without a second call: on a quiet machine a probe of fewer threads costs one slow call, not
// two (a 2-core ViT forward on 1 thread takes about 1.8x).
constexpr double kEarlyLoss = 1.25;
constexpr double kTypicalWeight = 0.1;  // of a new call in a count's typical time
constexpr int64_t kFirstInterval = 4;
constexpr int64_t kMaxInterval = 128;
constexpr int64_t kTriggerGap = 4;  // calls between two probes started by a slowdown

double mean_of_last(const AdaptiveThreads::Level& l) {
  if (l.timed >= 2) return 0.5 * (l.last[0] + l.last[1]);
  if (l.timed == 1) return l.last[1];
  return std::numeric_limits<double>::infinity();
}

void start_probe(AdaptiveThreads::State& s, int level) {
  s.probing = level;
  s.levels[static_cast<size_t>(level)].timed = 0;  // two fresh calls decide
}

}  // namespace

bool adaptive_threads_default() {
  const char* v = std::getenv("VITPE_ADAPTIVE_THREADS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

AdaptiveThreads::State AdaptiveThreads::make_state(int top) {
  State s;
  s.top = std::max(1, top);
  int t = s.top;
  while (true) {
    Level l;
    l.threads = t;
    l.next_probe = kFirstInterval;
    s.levels.push_back(l);
    if (t <= 1) break;
    t /= 2;
  }
  return s;
}

int AdaptiveThreads::next_level(const State& s) { return s.probing >= 0 ? s.probing : s.current; }

void AdaptiveThreads::record(State& s, int level, double seconds) {
  ++s.calls;
  Level& l = s.levels[static_cast<size_t>(level)];
  if (++l.runs == 1) return;  // a count's first call builds its primitives: not timed
  l.last[0] = l.last[1];
  l.last[1] = seconds;
  ++l.timed;
  const double typical = l.typical;  // before this call
  l.typical = typical == 0 ? seconds : (1 - kTypicalWeight) * typical + kTypicalWeight * seconds;

  const int levels = static_cast<int>(s.levels.size());
  if (s.probing == level) {
    Level& cur = s.levels[static_cast<size_t>(s.current)];
    const bool lost_early = l.timed == 1 && seconds > kEarlyLoss * mean_of_last(cur);
    if (l.timed < 2 && !lost_early) return;
    s.probing = -1;
    const double win = level > s.current ? kWinFewer : kWinMore;
    if (!lost_early && mean_of_last(l) < win * mean_of_last(cur)) {
      cur.interval = kFirstInterval;  // the count left behind is tried again soon
      cur.next_probe = s.calls + cur.interval;
      s.current = level;
    } else {
      l.interval = std::min(2 * l.interval, kMaxInterval);
      l.next_probe = s.calls + l.interval;
    }
    return;
  }
  if (level != s.current) return;  // a call begun before the state changed
  // A sustained slowdown (the last two calls over 1.3x the typical) probes one count down now.
  if (level + 1 < levels && l.timed >= 3 && l.last[0] > kSlower * typical &&
      l.last[1] > kSlower * typical && s.calls - s.last_trigger >= kTriggerGap) {
    s.last_trigger = s.calls;
    start_probe(s, level + 1);
    return;
  }
  for (int n : {level + 1, level - 1}) {
    if (n < 0 || n >= levels) continue;
    if (s.calls >= s.levels[static_cast<size_t>(n)].next_probe) {
      start_probe(s, n);
      return;
    }
  }
}

AdaptiveThreads::Call::Call(AdaptiveThreads& owner, uint64_t key)
    : owner_(owner), key_(key), before_(num_threads()), threads_(before_) {
  if (owner_.enabled_) {
    std::lock_guard<std::mutex> lock(owner_.mutex_);
    State& s = owner_.states_[key_];
    if (s.levels.empty() || s.top != std::max(1, before_)) s = make_state(before_);
    level_ = next_level(s);
    threads_ = s.levels[static_cast<size_t>(level_)].threads;
  }
  if (threads_ != before_) set_num_threads(threads_);
  exceptions_ = std::uncaught_exceptions();
  start_ = std::chrono::steady_clock::now();
}

AdaptiveThreads::Call::~Call() {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (threads_ != before_) set_num_threads(before_);
  std::lock_guard<std::mutex> lock(owner_.mutex_);
  ++owner_.counts_[threads_];
  if (level_ < 0 || std::uncaught_exceptions() != exceptions_) return;
  auto it = owner_.states_.find(key_);
  // Another thread may have remade the state for another caller count meanwhile.
  if (it == owner_.states_.end() || it->second.top != std::max(1, before_) ||
      level_ >= static_cast<int>(it->second.levels.size())) {
    return;
  }
  record(it->second, level_, seconds);
}

std::map<int, int64_t> AdaptiveThreads::calls_per_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

int64_t AdaptiveThreads::recorded_calls(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(key);
  return it == states_.end() ? 0 : it->second.calls;
}

int AdaptiveThreads::current_threads(uint64_t key) const {
  const int caller = num_threads();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(key);
  if (!enabled_ || it == states_.end() || it->second.top != std::max(1, caller)) return caller;
  return it->second.levels[static_cast<size_t>(next_level(it->second))].threads;
}

}  // namespace vitpe
