// Checks a whole model's backward against central finite differences: for the loss
// sum(w * logits), the gradient of up to `samples` entries of every parameter, with step h
// (smaller for models whose post-norm LayerNorms curve the loss within 1e-2).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tests/testing.h"
#include "vit/models/model.h"

namespace vitpe::testing {

inline void check_model_gradients(Model& model, const Tensor& x, int64_t samples,
                                  const std::string& what, double h = 1e-2) {
  // Move every parameter away from its initial value: a class token of ~1e-6 makes its
  // LayerNorm so steep that finite differences measure nothing.
  Rng rng(11);
  for (Param* p : model.params())
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.at(i) += 0.2f * rng.normal();
  // The output's shape: [B, classes], or the pooled features [B, D] of a model without a head.
  const Tensor w = random_tensor(model.forward(x).shape(), 9);
  model.zero_grad();
  model.forward(x, true);
  model.backward(w);
  auto loss = [&] { return weighted_sum(model.forward(x), w); };
  for (Param* p : model.params()) {
    const Tensor analytic = p->grad.clone();
    const int64_t n = p->value.numel(), stride = std::max<int64_t>(1, n / samples);
    double max_err = 0, max_ref = 1e-6;
    for (int64_t i = 0; i < n; i += stride) {
      const float orig = p->value.at(i);
      p->value.at(i) = static_cast<float>(orig + h);
      const double fp = loss();
      p->value.at(i) = static_cast<float>(orig - h);
      const double fm = loss();
      p->value.at(i) = orig;
      const double num = (fp - fm) / (2 * h);
      max_err = std::max(max_err, std::fabs(num - analytic.at(i)));
      max_ref = std::max(max_ref, std::fabs(num));
    }
    EXPECT_LT(max_err, 2e-2 * max_ref + 2e-4)
        << what << ": gradient of " << p->name << " (max |numeric| " << max_ref << ")";
  }
}

}  // namespace vitpe::testing
