// The op profile's totals (see op_profile.h): relaxed atomics, so that timed ops on several
// threads never tear a total; a disabled scope reads one flag.
#include "ops/op_profile.h"

#include <atomic>
#include <chrono>

namespace vitpe {
namespace {

constexpr int kClasses = static_cast<int>(OpClass::count);
std::atomic<bool> g_enabled{false};
std::atomic<int64_t> g_ns[kClasses];
std::atomic<int64_t> g_calls[kClasses];
std::atomic<double> g_flops[kClasses];
thread_local int t_depth = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void clear() {
  for (int i = 0; i < kClasses; ++i) {
    g_ns[i].store(0, std::memory_order_relaxed);
    g_calls[i].store(0, std::memory_order_relaxed);
    g_flops[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace

const char* op_class_name(OpClass k) {
  switch (k) {
    case OpClass::linear:
      return "linear";
    case OpClass::attention:
      return "attention";
    case OpClass::layernorm:
      return "layernorm";
    case OpClass::softmax:
      return "softmax";
    case OpClass::gelu:
      return "gelu";
    case OpClass::elementwise:
      return "elementwise";
    case OpClass::copies:
      return "copies";
    case OpClass::patch_embed:
      return "patch embed";
    case OpClass::other:
      return "other ops";
    case OpClass::count:
      break;
  }
  return "?";
}

void op_profile_enable(bool on) {
  if (on) clear();
  g_enabled.store(on, std::memory_order_relaxed);
}

bool op_profile_enabled() { return g_enabled.load(std::memory_order_relaxed); }

OpTotals op_profile_take() {
  OpTotals t;
  for (int i = 0; i < kClasses; ++i) {
    t.seconds[i] = 1e-9 * static_cast<double>(g_ns[i].exchange(0, std::memory_order_relaxed));
    t.calls[i] = g_calls[i].exchange(0, std::memory_order_relaxed);
    t.flops[i] = g_flops[i].exchange(0, std::memory_order_relaxed);
  }
  return t;
}

OpScope::OpScope(OpClass kind, double flops) {
  if (t_depth++ > 0 || !g_enabled.load(std::memory_order_relaxed)) return;
  kind_ = static_cast<int>(kind);
  flops_ = flops;
  start_ns_ = now_ns();
}

OpScope::~OpScope() {
  --t_depth;
  if (kind_ < 0) return;
  g_ns[kind_].fetch_add(now_ns() - start_ns_, std::memory_order_relaxed);
  g_calls[kind_].fetch_add(1, std::memory_order_relaxed);
  if (flops_ > 0) {
    double cur = g_flops[kind_].load(std::memory_order_relaxed);
    while (!g_flops[kind_].compare_exchange_weak(cur, cur + flops_, std::memory_order_relaxed)) {
    }
  }
}

}  // namespace vitpe
