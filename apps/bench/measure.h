// Small measurements more than one benchmark takes.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/tensor.h"

namespace vitpe::app {

// CPU seconds (user + system) this process has used so far, all its threads together.
inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Largest |ref - got| over the largest |ref|: the error of low-precision logits `got` against
// f32 `ref`. Both f32 of one shape.
inline double max_rel_diff(const Tensor& ref, const Tensor& got) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(ref.f32()[i] - got.f32()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(ref.f32()[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace vitpe::app
