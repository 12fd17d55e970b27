// The pieces of linear_int8_forward (ops/cpu/linear_int8.cpp) on raw row-major pointers, for the
// tests that check each against an exact reference. The numbers are defined in ops/ops.h.
#pragma once

#include <cstdint>

namespace vitpe::cpu {

class CachedPrimitive;

// x: [M, K] f32 -> a: [M, K] u8, scale: [M], zero: [M], per row as ops/ops.h says.
void quantize_rows_u8(uint8_t* a, float* scale, int32_t* zero, const float* x, int64_t m,
                      int64_t k);

// a: [M, K] u8, q: [N, K] s8 with |q| <= kInt8WeightMax -> acc: [M, N] s32 = a q^T, by oneDNN's
// u8 x s8 matmul (cached primitive). Exact on every ISA for weights in that range.
void matmul_u8s8s32(int32_t* acc, const uint8_t* a, const int8_t* q, int64_t m, int64_t k,
                    int64_t n);
// The cached primitive matmul_u8s8s32 runs, for the calling thread (ops/cpu/dnnl_cache.h); run
// it with {a, q, acc}. q may point into a larger [N', K] matrix: its rows are K apart.
CachedPrimitive& u8s8s32_primitive(int64_t m, int64_t k, int64_t n);

}  // namespace vitpe::cpu
