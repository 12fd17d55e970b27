// Deterministic random numbers for initialisation, data order and augmentation.
// SplitMix64 seeding + xoshiro256** generator: the same seed gives the same stream on every
// machine and compiler (no std:: distributions, whose output is implementation-defined).
#pragma once

#include <cmath>
#include <cstdint>

#include "vitpe/ops/tensor.h"

namespace vitpe {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }

  uint64_t next() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  // Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Normal(0, std) truncated to [-2, 2] (absolute bounds, as timm's trunc_normal_ defaults) by
  // resampling; with std 0.02 the bounds are 100 std away, so this is a plain normal.
  double trunc_normal(double std) {
    for (;;) {
      double x = normal() * std;
      if (x >= -2.0 && x <= 2.0) return x;
    }
  }

  // Fill helpers for CPU f32 tensors.
  void fill_normal(Tensor& t, double std) {
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(normal() * std);
  }
  void fill_trunc_normal(Tensor& t, double std) {
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(trunc_normal(std));
  }
  void fill_uniform(Tensor& t, double lo, double hi) {
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(uniform(lo, hi));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace vitpe
