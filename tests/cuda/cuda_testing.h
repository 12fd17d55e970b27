// Helpers for the CUDA tests: the skip when no device is present, device upload/download in f32
// or bf16, output poisoning, and the CPU builders of what the attention kernel computes in
// place: dense biases from a relbias table, ALiBi-2D slopes and Swin's shift mask, and RoPE
// (written here from timm's construction, independent of the CUDA code). The
// attention itself is checked against ref::attention (ops/reference.h) with these dense terms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/cuda/cuda_ops.h"
#include "ops/device_memory.h"
#include "ops/reference.h"
#include "tests/attention_reference.h"
#include "tests/testing.h"

#define VITPE_REQUIRE_CUDA()                                                           \
  do {                                                                                 \
    if (!::vitpe::cuda_available())                                                    \
      GTEST_SKIP() << "no CUDA device: this test needs an NVIDIA GPU and driver (run " \
                      "tests/cuda/device_check.sh on a GPU machine)";                  \
  } while (0)

namespace vitpe::cudatest {

// Tolerances of the issue: max |a - b| / max |b|.
constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16 = 1e-2;

inline double tol(DType t) { return t == DType::f32 ? kTolF32 : kTolBf16; }

// The values the device will see: x itself for f32, x rounded to bf16 (back in f32) for bf16.
inline Tensor rounded(const Tensor& x, DType t) {
  return t == DType::f32 ? x.clone() : x.to(DType::bf16).to(DType::f32);
}

// CPU f32 -> device tensor of dtype t.
inline Tensor upload(const Tensor& x, DType t) {
  return t == DType::f32 ? x.to(Device::cuda) : x.to(DType::bf16).to(Device::cuda);
}

// Device tensor (f32 or bf16) -> CPU f32.
inline Tensor download(const Tensor& x) {
  Tensor h = x.to(Device::cpu);
  return h.dtype() == DType::f32 ? h : h.to(DType::f32);
}

// A device tensor of the given shape filled with NaN, so an element the kernel forgets to write
// shows up as an error.
inline Tensor poisoned(const Shape& s, DType t) {
  Tensor h = Tensor::full(s, std::numeric_limits<float>::quiet_NaN());
  return upload(h, t);
}

// Like testing::max_rel_error, but a NaN anywhere is an infinite error.
inline double rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (!std::isfinite(a.at(i))) return std::numeric_limits<double>::infinity();
  return testing::max_rel_error(a, b);
}

// The independent references (dense relbias, ALiBi, shift mask, RoPE) are shared with the CPU
// tests of ops/attention_terms.h.
using testing::add_tensors;
using testing::alibi_dense;
using testing::relbias_dense;
using testing::rope_ref;
using testing::shift_mask_dense;

}  // namespace vitpe::cudatest
