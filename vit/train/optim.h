// AdamW over a model's parameters, the learning-rate schedule (linear warmup + cosine decay)
// and gradient-norm clipping.
//
// The update is PyTorch's torch.optim.AdamW (decoupled weight decay), step t = 1, 2, ...:
//   p -= lr * wd * p                       (skipped for Param::no_decay)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "encodings/encoding.h"
#include "ops/tensor.h"

namespace vitpe {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.05f;
};

class AdamW {
 public:
  // lr_scale: per parameter, the factor of its learning rate (layer-wise decay, a head's own
  // rate: timm's per-group lr_scale); empty: 1 for every parameter. Weight decay is applied at
  // the parameter's own rate, as PyTorch does per group.
  AdamW(std::vector<Param*> params, AdamWOptions options = {}, std::vector<float> lr_scale = {});

  // One update of every parameter with its current gradient at learning rate lr x its scale.
  void step(float lr);
  int64_t steps() const { return t_; }
  const AdamWOptions& options() const { return opt_; }
  const std::vector<Param*>& params() const { return params_; }
  const std::vector<float>& lr_scales() const { return lr_scale_; }

  // The state for checkpoints: ("m." + name, m), ("v." + name, v) per parameter; the step
  // count travels separately (steps() / set_steps()).
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Restores a state saved by state(); throws naming a missing or mis-shaped entry.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t steps);

 private:
  std::vector<Param*> params_;
  std::vector<float> lr_scale_;  // one per parameter
  std::vector<Tensor> m_, v_;
  // The update's work items: blocks of up to 16384 elements of each parameter (made once, so a
  // step allocates nothing).
  struct Block {
    size_t param;
    int64_t begin, end;
  };
  std::vector<Block> blocks_;
  AdamWOptions opt_;
  int64_t t_ = 0;
};

// Linear warmup from base_lr / warmup to base_lr over `warmup` steps, then cosine decay to
// min_lr at `total` steps: lr(s) = base * (s + 1) / warmup for s < warmup, else
// min + (base - min) * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2.
struct Schedule {
  double base_lr = 1e-3;
  double min_lr = 1e-5;
  int64_t warmup = 0;
  int64_t total = 1;
  double at(int64_t step) const;
};

// Scales every gradient so that the global L2 norm is at most max_norm (as PyTorch's
// clip_grad_norm_: factor max_norm / (norm + 1e-6) when norm > max_norm; max_norm <= 0
// disables clipping). Returns the norm before clipping (accumulated in double).
double clip_grad_norm(const std::vector<Param*>& params, double max_norm);

}  // namespace vitpe
