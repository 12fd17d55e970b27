// Helpers shared by the test suites: random tensors, error measures, finite differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "ops/random.h"
#include "ops/tensor.h"

namespace vitpe::testing {

inline Tensor random_tensor(const Shape& s, uint64_t seed, double std = 1.0) {
  Rng rng(seed);
  Tensor t = Tensor::empty(s);
  rng.fill_normal(t, std);
  return t;
}

// max |a - b| / max(max |b|, tiny): a relative error that is robust to entries near zero.
inline double max_rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel()) << a.shape().str() << " vs " << b.shape().str();
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a.at(i)) - b.at(i)));
    scale = std::max(scale, std::fabs(static_cast<double>(b.at(i))));
  }
  return diff / scale;
}

// Central finite differences of a scalar function f of the tensor x (perturbed in place):
// returns df/dx, computed in double from f's double result. Step h relative to 1.
// The largest |a - b| over the elements (same shapes; 0 for bitwise-equal tensors).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a.at(i)) - b.at(i)));
  }
  return worst;
}

inline Tensor numeric_grad(Tensor& x, const std::function<double()>& f, double h = 1e-3) {
  Tensor g = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    float orig = x.at(i);
    x.at(i) = static_cast<float>(orig + h);
    double fp = f();
    x.at(i) = static_cast<float>(orig - h);
    double fm = f();
    x.at(i) = orig;
    // use the step actually taken in float
    double step = static_cast<double>(static_cast<float>(orig + h)) -
                  static_cast<double>(static_cast<float>(orig - h));
    g.at(i) = static_cast<float>((fp - fm) / step);
  }
  return g;
}

// sum(w * y) for a fixed random weight w: turns a tensor output into a scalar loss whose
// gradient with respect to y is w.
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.at(i)) * w.at(i);
  return s;
}

// The message of what f throws, or "(no exception)": tests then check the message names what it
// must (file, tensor, expected and found).
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace vitpe::testing
