// Row-major linear layers on raw pointers, shared by ops/cpu/linear.cpp (which checks Tensor
// shapes) and ops/cpu/patch_embed.cpp (which feeds it im2col rows from a scratch buffer).
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace vitpe::cpu {

// x: [M, K] f32, w: [N, K] (w_dtype f32 or bf16), b: [N] f32 or nullptr,
// residual: [M, N] or nullptr (may equal y) -> y: [M, N] = act(x w^T + b) + residual.
void linear_rows_forward(float* y, const float* x, const void* w, DType w_dtype, const float* b,
                         int64_t m, int64_t k, int64_t n, Act act, const float* residual);

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

// The checks of a linear layer's outputs, shared by linear_forward and linear_int8_forward: y
// (and the residual, when defined) [..., N] f32 on the CPU with x's leading shape, b [N] f32 when
// defined, and y not x itself when there are rows (m > 0).
void check_linear_outputs(const char* op, const Tensor& x, const Tensor& y, const Tensor& b,
                          const Tensor& residual, int64_t n, int64_t m);

// Throws a clear error unless the CPU computes bf16 matmuls natively.
void require_bf16(const char* op);

}  // namespace vitpe::cpu
