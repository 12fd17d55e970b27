// Row-major linear layers on raw pointers, shared by ops/cpu/linear.cpp (which checks Tensor
// shapes) and ops/cpu/patch_embed.cpp (which feeds it im2col rows from a scratch buffer).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

#include "ops/ops.h"

namespace vitpe::cpu {

// x: [M, K] f32, w: [N, K] (w_dtype f32 or bf16), b: [N] f32 or nullptr,
// residual: [M, N] or nullptr (may equal y), scale: [N] or nullptr ->
// y: [M, N] = act(x w^T + b) * scale + residual.
// packed: w's packed copy (pack_weights of f32 w), read where the matmul reads its layout.
void linear_rows_forward(float* y, const float* x, const void* w, DType w_dtype, const float* b,
                         int64_t m, int64_t k, int64_t n, Act act, const float* residual,
                         const PackedWeights* packed = nullptr, const float* scale = nullptr);

// Bias gradients (column sums of dy) add runs of kColumnSumRows rows in float (from 0, row by
// row), then the runs' sums in double in row order: linear_rows_backward, and the GELU backward
// that sums its output for the next layer's bias.
constexpr int64_t kColumnSumRows = 32;

// dy: [M, N] -> dx: [M, K] += dy w, dw: [N, K] += dy^T x, db: [N] += column sums of dy.
// Any of dx, dw, db may be nullptr (not needed); accumulate = false overwrites instead of
// adding. dw and db are f32 whatever w_dtype is.
void linear_rows_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                          const void* w, DType w_dtype, int64_t m, int64_t k, int64_t n,
                          bool accumulate = true);

// A weight matrix converted once for inference (pack_weights, quantize_weights_int8): CPU f32
// of shape [N, K] with N, K > 0, or an error naming op and the shape found.
void check_weight_matrix(const char* op, const Tensor& w);

// The checks of a linear layer's outputs, shared by linear_forward and linear_int8_forward: y
// (and the residual, when defined) [..., N] f32 on the CPU with x's leading shape, b [N] f32 when
// defined, the per-output scale [N] f32 when defined, and y not x itself when there are rows
// (m > 0).
void check_linear_outputs(const char* op, const Tensor& x, const Tensor& y, const Tensor& b,
                          const Tensor& residual, int64_t n, int64_t m, const Tensor& scale = {});

// The first exception of a parallel region's threads, rethrown by the caller after the region
// (an exception must not leave an OpenMP region); the other threads skip their remaining work.
// (try/catch is written out in the region, not wrapped in a lambda: a lambda's body would lose
// the AVX2 target of the function that holds the region.)
struct RegionError {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr error;
  void keep(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = std::move(e);
    failed.store(true, std::memory_order_relaxed);
  }
  bool stopped() const { return failed.load(std::memory_order_relaxed); }
};

// y = GELU(x) for count values (y may be x), split over the OpenMP threads: on AVX-512 from the
// table of gelu.cpp (relative error under 1e-6 on [-5, 5], 7e-6 on [-7, 7], 0 below -7),
// elsewhere gelu_forward's kernels. The inference linears' GELU after their product; training
// keeps gelu_forward_with_derivative's values (gelu_forward gives the same bits).
void gelu_rows(float* y, const float* x, int64_t count);

// y = GELU(x) and d = GELU'(x) of count values on the calling thread (AVX2 or SSE; d may be x):
// the body of gelu_forward_with_derivative, for a block of rows inside a caller's parallel region.
void gelu_with_derivative_rows(float* y, float* d, const float* x, int64_t count);

// One run of at most kColumnSumRows rows of n: dx = dy * d (dx may be dy), and sums[j] = the
// run's column sums of dx (from 0, row by row, in float), on the calling thread.
void gelu_backward_run(float* dx, const float* dy, const float* d, int64_t rows, int64_t n,
                       float* sums);

// Column j's total of the runs' sums part[r * n + j] (r < runs), added in run order in double:
// the second half of a bias gradient (runs of rows, or attention's images).
inline float run_total(const float* part, int64_t runs, int64_t n, int64_t j) {
  double acc = 0.0;
  for (int64_t r = 0; r < runs; ++r) acc += part[r * n + j];
  return static_cast<float>(acc);
}

// dx = (dy w) * d, overwritten, and sums [K] += the column sums of dx, for dy: [M, N], w: [N, K]
// f32 (see linear_gelu_backward_data in ops/ops.h).
void linear_gelu_backward_rows(float* dx, float* sums, const float* dy, const float* w,
                               const float* d, int64_t m, int64_t k, int64_t n);

// y = GELU(x w^T + b), d = GELU'(x w^T + b) for x: [M, K], w: [N, K] f32 (see
// linear_gelu_forward_with_derivative in ops/ops.h).
void linear_gelu_rows(float* y, float* d, const float* x, const float* w, const float* b, int64_t m,
                      int64_t k, int64_t n);

// Throws a clear error unless the CPU computes bf16 matmuls natively.
void require_bf16(const char* op);

}  // namespace vitpe::cpu
