// Where a forward pass or a training step spends its time, by class of op: the CPU ops, forward
// and backward, time themselves while a profile is on (bench --model ... --profile, bench train
// --profile), and cost one relaxed atomic load when it is off.
//
// Each timed op adds its wall time (and, for the linears and attention, the floating-point work
// it did) to its class's totals. Only the outermost op of a thread is timed: an op that calls
// another counts once, under its own class. The time between ops (the model's own code: token
// concatenation, encodings, window shifts) is the forward's time minus the ops' sum.
//
// The totals are process-wide and shared by all threads; profile ops called from one thread at a
// time (a forward pass) for numbers that add up to the wall time.
#pragma once

#include <array>
#include <cstdint>

namespace vitpe {

enum class OpClass : int {
  // Each class holds the forward op and its backward.
  linear = 0,   // linear_forward (f32, bf16), linear_int8_forward (with their fused GELU, residual)
  attention,    // attention_forward (both products, the softmax, bias and mask)
  layernorm,    // layernorm_forward
  softmax,      // softmax_forward on its own
  gelu,         // gelu_forward, swiglu_forward on their own (not fused into a linear)
  elementwise,  // add_forward, layer_scale_add_forward, cosine_qk_forward
  copies,       // split_heads_forward, merge_heads_forward; Swin's window gather and scatter
  patch_embed,  // patch_embed_forward (im2col and its product)
  other,        // dwconv3x3_forward, mean_tokens_forward, cross_entropy_forward
  count
};
const char* op_class_name(OpClass k);

struct OpTotals {
  std::array<double, static_cast<int>(OpClass::count)> seconds{};
  std::array<int64_t, static_cast<int>(OpClass::count)> calls{};
  std::array<double, static_cast<int>(OpClass::count)> flops{};
};

// Turns the profile on or off; turning it on clears the totals.
void op_profile_enable(bool on);
bool op_profile_enabled();
// The totals since the profile was turned on (or last taken), which are then cleared.
OpTotals op_profile_take();

// Times the enclosing op when the profile is on and no op encloses it on this thread.
class OpScope {
 public:
  explicit OpScope(OpClass kind, double flops = 0);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  int kind_ = -1;  // -1: not timed
  double flops_ = 0;
  int64_t start_ns_ = 0;
};

}  // namespace vitpe
