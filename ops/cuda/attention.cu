// Fused attention on the device: softmax(rope(q) rope(k)^T * scale + bias) v for q, k, v
// [B, H, N, hd], tiled over queries and keys with an online softmax (no N x N matrix in global
// memory). The positional encodings are evaluated inside the kernel from their small
// parameters (ops/attention_terms.h): the relative-position table (staged per head in shared
// memory), ALiBi-2D slopes, Swin's shift mask from region ids, RoPE applied to q and k as the
// tiles are loaded. A dense [H, N, N] bias and a [W, N, N] mask are also accepted, for any
// other encoding and as the FasterTransformer-style baseline.
//
// v1 (f32, CUDA cores): 4 warps, 16 queries per block (4 per warp), key tiles of 32 (one key
//    per lane); per query row a warp computes 32 logits, updates the running max and sum, and
//    accumulates p v with the probabilities broadcast by shuffles. f32 throughout.
// v2 (bf16, tensor cores): FlashAttention-2 layout. 4 warps, 64 queries per block (16 per warp),
//    key tiles of 64 (32 for hd 128). mma.sync m16n8k16 (bf16 in, f32 accumulate) for S = Q K^T
//    and for O += P V; S stays in registers, the softmax works on the accumulator layout
//    (each row spread over the 4 lanes of a quad), P is re-packed in registers as the A operand
//    of the second mma. Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
//    g = lane / 4, t = lane % 4:
//      A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//      B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//      C (16x8):       c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
//    (the lower 16 bits of a register hold the element with the smaller k).
#include <cuda_bf16.h>

#include <cmath>

#include "ops/attention_terms.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

constexpr int kThreads = 128;         // 4 warps in both kernels
constexpr int kMaxStagedRows = 4096;  // table rows staged in shared memory (16 KiB)

struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int B, H, N;
  float scale;
  int stage_table;  // 1: head h's table column is copied into shared memory
  AttnBiasArgs bias;
};

// Per-block view of the bias terms for batch entry b, head h.
struct HeadBias {
  const float* tab = nullptr;
  int tab_stride = 0;
  float slope = 0.f;
  const float* dense = nullptr;  // [N, N] of head h
  const float* mask = nullptr;   // [N, N] of window b % W
  bool positional = false;

  __device__ __forceinline__ float at(const AttnBiasArgs& a, int i, int j, TokenPos qi,
                                      TokenPos kj) const {
    float s = 0.f;
    const size_t ij = static_cast<size_t>(i) * a.N + j;
    if (dense) s += dense[ij];
    if (mask) s += mask[ij];
    if (positional) s += positional_bias(a, tab, tab_stride, slope, qi, kj);
    return s;
  }
};

// Block prologue shared by both kernels: stages the table column (the caller synchronises
// before the first use) and resolves the per-head pointers.
__device__ HeadBias head_bias(const AttnArgs& a, int b, int h, float* s_tab) {
  HeadBias hb;
  const AttnBiasArgs& ba = a.bias;
  if (ba.table) {
    if (a.stage_table) {
      for (int r = threadIdx.x; r < ba.table_rows; r += blockDim.x)
        s_tab[r] = ba.table[static_cast<size_t>(r) * ba.H + h];
      hb.tab = s_tab;
      hb.tab_stride = 1;
    } else {
      hb.tab = ba.table + h;
      hb.tab_stride = ba.H;
    }
  }
  hb.slope = ba.slopes ? ba.slopes[h] : 0.f;
  const size_t NN = static_cast<size_t>(ba.N) * ba.N;
  if (ba.dense) hb.dense = ba.dense + h * NN;
  if (ba.mask) hb.mask = ba.mask + (b % ba.mask_windows) * NN;
  hb.positional = ba.has_positional();
  return hb;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// exp(x - m) for the online softmax; x = -inf (masked out, or the initial running max) gives 0.
__device__ __forceinline__ float exp_shifted(float x, float m) {
  return x == -INFINITY ? 0.f : expf(x - m);
}

// ---------------------------------------------------------------------------------------------
// v1: f32

constexpr int kF32Rows = 16;  // queries per block
constexpr int kF32Keys = 32;  // keys per tile (one per lane)

// Rows [r0, r0 + rows) of src [N, HD] into dst (row stride LD), RoPE-rotated when `rotate`,
// zero rows past N.
template <int HD, int LD>
__device__ void load_rows_f32(float* dst, const float* src, int r0, int rows, const AttnArgs& a,
                              int b, int h, bool rotate) {
  constexpr int kPairs = HD / 2;
  for (int c = threadIdx.x; c < rows * kPairs; c += blockDim.x) {
    const int r = c / kPairs, k = c % kPairs, t = r0 + r;
    float x0 = 0.f, x1 = 0.f;
    if (t < a.N) {
      const float2 v = *reinterpret_cast<const float2*>(src + static_cast<size_t>(t) * HD + 2 * k);
      x0 = v.x;
      x1 = v.y;
      if (rotate) {
        const float ang = rope_angle(a.bias, HD, h, k, token_pos(a.bias, b, t));
        float sn, cs;
        sincosf(ang, &sn, &cs);
        const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
        x0 = y0;
        x1 = y1;
      }
    }
    dst[r * LD + 2 * k] = x0;
    dst[r * LD + 2 * k + 1] = x1;
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads) attention_f32_kernel(AttnArgs a) {
  constexpr int kWarps = kThreads / 32, kRowsPerWarp = kF32Rows / kWarps, kCols = HD / 32;
  __shared__ float qs[kF32Rows * HD];        // read as broadcasts
  __shared__ float ks[kF32Keys * (HD + 1)];  // lane j reads row j: padded against conflicts
  __shared__ float vs[kF32Keys * HD];        // lanes read consecutive columns
  __shared__ TokenPos kpos[kF32Keys];
  extern __shared__ float s_tab[];

  const int bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int q0 = blockIdx.y * kF32Rows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t base = static_cast<size_t>(bh) * a.N * HD;
  const float* Q = static_cast<const float*>(a.q) + base;
  const float* K = static_cast<const float*>(a.k) + base;
  const float* V = static_cast<const float*>(a.v) + base;
  float* O = static_cast<float*>(a.out) + base;
  const bool rotate = a.bias.rope != nullptr;

  const HeadBias hb = head_bias(a, b, h, s_tab);
  load_rows_f32<HD, HD>(qs, Q, q0, kF32Rows, a, b, h, rotate);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kCols];
  TokenPos qp[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[rr][c] = 0.f;
    qp[rr] = token_pos(a.bias, b, q0 + warp * kRowsPerWarp + rr);
  }

  for (int j0 = 0; j0 < a.N; j0 += kF32Keys) {
    __syncthreads();  // the previous tile is consumed (and qs, s_tab are written)
    load_rows_f32<HD, HD + 1>(ks, K, j0, kF32Keys, a, b, h, rotate);
    load_rows_f32<HD, HD>(vs, V, j0, kF32Keys, a, b, h, false);
    if (threadIdx.x < kF32Keys) kpos[threadIdx.x] = token_pos(a.bias, b, j0 + threadIdx.x);
    __syncthreads();

    const int j = j0 + lane, keys = min(kF32Keys, a.N - j0);
    const bool jv = j < a.N;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = q0 + r;
      if (i >= a.N) continue;  // uniform across the warp
      float s = -INFINITY;
      if (jv) {
        float dot = 0.f;
#pragma unroll 8
        for (int d = 0; d < HD; ++d) dot += qs[r * HD + d] * ks[lane * (HD + 1) + d];
        s = dot * a.scale + hb.at(a.bias, i, j, qp[rr], kpos[lane]);
      }
      const float m_new = fmaxf(m[rr], warp_max(s));  // finite: key j0 is valid
      const float alpha = exp_shifted(m[rr], m_new);
      const float p = exp_shifted(s, m_new);
      l[rr] = l[rr] * alpha + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[rr][c] *= alpha;
      for (int jj = 0; jj < keys; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[rr][c] += pj * vs[jj * HD + lane + 32 * c];
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = q0 + warp * kRowsPerWarp + rr;
    if (i >= a.N) continue;
    const float inv = 1.f / l[rr];
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      O[static_cast<size_t>(i) * HD + lane + 32 * c] = acc[rr][c] * inv;
  }
}

// ---------------------------------------------------------------------------------------------
// v2: bf16 on tensor cores

constexpr int kBf16Rows = 64;  // queries per block (16 per warp)

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
// Two floats as bf16 (round to nearest even) in one register, `lo` in the lower 16 bits.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
__device__ __forceinline__ uint32_t pack_raw(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}
__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// d += a b (m16n8k16, bf16 inputs, f32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the host refuses bf16 attention below sm_80
#endif
}

// Rows [r0, r0 + rows) of src [N, HD] into dst (row stride HD + 8), 16-byte chunks,
// RoPE-rotated in f32 when `rotate`, zero rows past N.
template <int HD>
__device__ void load_rows_bf16(__nv_bfloat16* dst, const __nv_bfloat16* src, int r0, int rows,
                               const AttnArgs& a, int b, int h, bool rotate) {
  constexpr int kChunks = HD / 8, LD = HD + 8;
  for (int c = threadIdx.x; c < rows * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8, t = r0 + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < a.N) {
      v = *reinterpret_cast<const uint4*>(src + static_cast<size_t>(t) * HD + col);
      if (rotate) {
        const TokenPos p = token_pos(a.bias, b, t);
        if (!p.prefix) {
          uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x0 = bf16_lo(w[e]), x1 = bf16_hi(w[e]);
            float sn, cs;
            sincosf(rope_angle(a.bias, HD, h, col / 2 + e, p), &sn, &cs);
            w[e] = pack_bf16(x0 * cs - x1 * sn, x0 * sn + x1 * cs);
          }
          v = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    }
    *reinterpret_cast<uint4*>(dst + r * LD + col) = v;
  }
}

template <int HD, int BC>
__global__ void __launch_bounds__(kThreads) attention_bf16_kernel(AttnArgs a) {
  constexpr int LD = HD + 8;   // padded rows: fragment loads hit 32 distinct banks
  constexpr int KT = HD / 16;  // k-steps of S = Q K^T
  constexpr int NT = BC / 8;   // n-tiles of S
  constexpr int PK = BC / 16;  // k-steps of O += P V
  constexpr int OT = HD / 8;   // n-tiles of O
  __shared__ __align__(16) __nv_bfloat16 qs[kBf16Rows * LD];
  __shared__ __align__(16) __nv_bfloat16 ks[BC * LD];
  __shared__ __align__(16) __nv_bfloat16 vs[BC * LD];
  __shared__ TokenPos kpos[BC];
  extern __shared__ float s_tab[];

  const int bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int q0 = blockIdx.y * kBf16Rows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const size_t base = static_cast<size_t>(bh) * a.N * HD;
  const auto* Q = static_cast<const __nv_bfloat16*>(a.q) + base;
  const auto* K = static_cast<const __nv_bfloat16*>(a.k) + base;
  const auto* V = static_cast<const __nv_bfloat16*>(a.v) + base;
  auto* O = static_cast<__nv_bfloat16*>(a.out) + base;
  const bool rotate = a.bias.rope != nullptr;

  const HeadBias hb = head_bias(a, b, h, s_tab);
  load_rows_bf16<HD>(qs, Q, q0, kBf16Rows, a, b, h, rotate);
  __syncthreads();

  // This lane's two query rows (g and g + 8 of the warp's 16) and their A fragments.
  const int rA = warp * 16 + g, rB = rA + 8;
  const int iA = q0 + rA, iB = q0 + rB;
  const TokenPos pA = token_pos(a.bias, b, iA), pB = token_pos(a.bias, b, iB);
  uint32_t qa[KT][4];
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    qa[kk][0] = ld32(qs + rA * LD + kk * 16 + 2 * t);
    qa[kk][1] = ld32(qs + rB * LD + kk * 16 + 2 * t);
    qa[kk][2] = ld32(qs + rA * LD + kk * 16 + 8 + 2 * t);
    qa[kk][3] = ld32(qs + rB * LD + kk * 16 + 8 + 2 * t);
  }

  float o[OT][4];
#pragma unroll
  for (int n = 0; n < OT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;

  for (int j0 = 0; j0 < a.N; j0 += BC) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_rows_bf16<HD>(ks, K, j0, BC, a, b, h, rotate);
    load_rows_bf16<HD>(vs, V, j0, BC, a, b, h, false);
    if (threadIdx.x < BC) kpos[threadIdx.x] = token_pos(a.bias, b, j0 + threadIdx.x);
    __syncthreads();

    // S = Q K^T: B[k = channel][n = key] = K[key][channel], two consecutive channels per load.
    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const __nv_bfloat16* kr = ks + (n * 8 + g) * LD + kk * 16 + 2 * t;
        mma_bf16(s[n], qa[kk], ld32(kr), ld32(kr + 8));
      }
    }

    // Logits and row maxima (element e: row g (e < 2) or g + 8, column n*8 + 2t + (e & 1)).
    float mxA = -INFINITY, mxB = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + 2 * t + (e & 1), j = j0 + col;
        const bool rowB = e >= 2;
        const int i = rowB ? iB : iA;
        float x = -INFINITY;
        if (j < a.N) {
          x = s[n][e] * a.scale;
          if (i < a.N) x += hb.at(a.bias, i, j, rowB ? pB : pA, kpos[col]);
        }
        s[n][e] = x;
        if (rowB)
          mxB = fmaxf(mxB, x);
        else
          mxA = fmaxf(mxA, x);
      }
    }
    // A row lives in the 4 lanes of a quad (same g, t = 0..3).
    mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 1));
    mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 2));
    mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 1));
    mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 2));
    const float mnA = fmaxf(mA, mxA), mnB = fmaxf(mB, mxB);  // finite: key j0 is valid
    const float alA = exp_shifted(mA, mnA), alB = exp_shifted(mB, mnB);
    float sumA = 0.f, sumB = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][0] = exp_shifted(s[n][0], mnA);
      s[n][1] = exp_shifted(s[n][1], mnA);
      s[n][2] = exp_shifted(s[n][2], mnB);
      s[n][3] = exp_shifted(s[n][3], mnB);
      sumA += s[n][0] + s[n][1];
      sumB += s[n][2] + s[n][3];
    }
    sumA += __shfl_xor_sync(0xffffffffu, sumA, 1);
    sumA += __shfl_xor_sync(0xffffffffu, sumA, 2);
    sumB += __shfl_xor_sync(0xffffffffu, sumB, 1);
    sumB += __shfl_xor_sync(0xffffffffu, sumB, 2);
    lA = lA * alA + sumA;
    lB = lB * alB + sumB;
    mA = mnA;
    mB = mnB;
#pragma unroll
    for (int n = 0; n < OT; ++n) {
      o[n][0] *= alA;
      o[n][1] *= alA;
      o[n][2] *= alB;
      o[n][3] *= alB;
    }

    // O += P V: P's accumulator layout is the A layout of the next mma (keys as k);
    // B[k = key][n = channel] = V[key][channel], two consecutive keys per register.
#pragma unroll
    for (int kc = 0; kc < PK; ++kc) {
      const uint32_t pa[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]),
                              pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                              pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
      const __nv_bfloat16* v0 = vs + (kc * 16 + 2 * t) * LD + g;
#pragma unroll
      for (int n = 0; n < OT; ++n) {
        const __nv_bfloat16* vn = v0 + n * 8;
        const uint32_t b0 = pack_raw(vn[0], vn[LD]);
        const uint32_t b1 = pack_raw(vn[8 * LD], vn[9 * LD]);
        mma_bf16(o[n], pa, b0, b1);
      }
    }
  }

  const float invA = 1.f / lA, invB = 1.f / lB;
#pragma unroll
  for (int n = 0; n < OT; ++n) {
    const int col = n * 8 + 2 * t;
    if (iA < a.N)
      *reinterpret_cast<uint32_t*>(O + static_cast<size_t>(iA) * HD + col) =
          pack_bf16(o[n][0] * invA, o[n][1] * invA);
    if (iB < a.N)
      *reinterpret_cast<uint32_t*>(O + static_cast<size_t>(iB) * HD + col) =
          pack_bf16(o[n][2] * invB, o[n][3] * invB);
  }
}

// ---------------------------------------------------------------------------------------------
// host

void check_param(const char* op, const char* what, const Tensor& t, const Shape& shape) {
  check_device(op, what, t);
  check_dtype(op, what, t, DType::f32);
  check_shape(op, what, t, shape);
}

std::string str(int64_t v) { return std::to_string(v); }

template <typename Kernel>
void launch(Kernel kernel, const char* name, dim3 grid, size_t dyn_smem, const AttnArgs& args) {
  if (dyn_smem > 0) {
    // The staged table is dynamic shared memory on top of the static tiles; above 48 KiB in
    // total a kernel must opt in.
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(dyn_smem)));
  }
  kernel<<<grid, kThreads, dyn_smem>>>(args);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda_error(e, name, __FILE__, __LINE__);
}

// q, k, v, out: same shape [B, H, N, hd] and dtype on the device, a supported head dim, no
// overlap of out with the inputs, 16-byte alignment.
void check_qkv(const char* op, const Tensor& out, const Tensor& q, const Tensor& k,
               const Tensor& v) {
  check_device(op, "q", q);
  check_device(op, "k", k);
  check_device(op, "v", v);
  check_device(op, "out", out);
  check_ndim(op, "q", q, 4);
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), hd = q.size(3);
  check_shape(op, "k", k, q.shape());
  check_shape(op, "v", v, q.shape());
  check_shape(op, "out", out, q.shape());
  check_dtype(op, "k", k, q.dtype());
  check_dtype(op, "v", v, q.dtype());
  check_dtype(op, "out", out, q.dtype());
  if (hd != 32 && hd != 64 && hd != 128) {
    throw ShapeError(std::string(op) + ": head_dim " + str(hd) + " of q " + q.shape().str() +
                     " is not supported (32, 64 or 128)");
  }
  if (B * H > kMaxInt || N > 65535LL * 16) {
    throw ShapeError(std::string(op) + ": q " + q.shape().str() + " is too large");
  }
  for (const Tensor* t : {&q, &k, &v}) {
    if (overlaps(out.raw(), out.nbytes(), t->raw(), t->nbytes()))
      throw std::invalid_argument(std::string(op) + ": out must not overlap q, k or v");
  }
  for (const Tensor* t : {&q, &k, &v, static_cast<const Tensor*>(&out)}) {
    if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0)
      throw std::invalid_argument(std::string(op) + ": q, k, v, out must be 16-byte aligned");
  }
}

// The dense bias [H, N, N] and mask [W, N, N] of the call.
void set_dense_terms(const char* op, AttnBiasArgs& ba, const AttentionParams& p, int64_t B,
                     int64_t H, int64_t N) {
  if (p.bias.defined()) {
    check_param(op, "bias", p.bias, Shape{H, N, N});
    ba.dense = p.bias.f32();
  }
  if (p.mask.defined()) {
    check_device(op, "mask", p.mask);
    check_dtype(op, "mask", p.mask, DType::f32);
    check_ndim(op, "mask", p.mask, 3);
    const int64_t W = p.mask.size(0);
    check_shape(op, "mask", p.mask, Shape{W, N, N});
    if (W <= 0 || B % W != 0) {
      throw ShapeError(std::string(op) + ": batch " + str(B) + " is not a multiple of the " +
                       str(W) + " mask windows");
    }
    ba.mask = p.mask.f32();
    ba.mask_windows = static_cast<int>(W);
  }
}

// The encoding's terms (relative table, ALiBi slopes, RoPE frequencies) and Swin's shift mask,
// checked against the geometry.
void set_positional_terms(const char* op, AttnArgs& args, const AttentionParams& p,
                          const Tensor& q) {
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), hd = q.size(3);
  AttnBiasArgs& ba = args.bias;
  const bool shift = p.shift_r != 0 || p.shift_c != 0;
  const AttentionTerms& t = p.terms;
  const bool positional = t.relative_table.defined() || t.distance_slopes.defined() ||
                          t.rotation_freqs.defined() || shift;
  const int64_t Mh = t.window_rows, Mw = t.window_cols;
  if (positional) {
    if (Mh <= 0 || Mw <= 0 || t.prefix < 0 || t.prefix + Mh * Mw != N) {
      throw ShapeError(std::string(op) + ": window " + str(Mh) + "x" + str(Mw) + " with " +
                       str(t.prefix) + " prefix tokens does not give the N = " + str(N) +
                       " tokens of q " + q.shape().str());
    }
    ba.prefix = static_cast<int>(t.prefix);
    ba.Mh = static_cast<int>(Mh);
    ba.Mw = static_cast<int>(Mw);
  }
  if (t.relative_table.defined()) {
    const int64_t rows = (2 * Mh - 1) * (2 * Mw - 1) + (t.prefix > 0 ? 3 : 0);
    check_param(op, "relative_table", t.relative_table, Shape{rows, H});
    ba.table = t.relative_table.f32();
    ba.table_rows = static_cast<int>(rows);
    args.stage_table = rows <= kMaxStagedRows ? 1 : 0;
  }
  if (t.distance_slopes.defined()) {
    check_param(op, "distance_slopes", t.distance_slopes, Shape{H});
    ba.slopes = t.distance_slopes.f32();
    ba.dist_sy = t.distance_scale_y;
    ba.dist_sx = t.distance_scale_x;
  }
  if (t.rotation_freqs.defined()) {
    if (t.rotation_approximate) {
      throw std::invalid_argument(std::string(op) +
                                  ": the rotation's terms only describe it (channel halves on "
                                  "offset coordinates); the kernel turns neighbouring pairs");
    }
    check_param(op, "rotation_freqs", t.rotation_freqs, Shape{H, hd / 2, 2});
    ba.rope = t.rotation_freqs.f32();
  }
  if (shift) {
    const int64_t R = p.image_rows, C = p.image_cols;
    if (t.prefix != 0) {
      throw std::invalid_argument(std::string(op) + ": the shift mask needs prefix 0, found " +
                                  str(t.prefix));
    }
    if (R <= 0 || C <= 0 || R % Mh != 0 || C % Mw != 0) {
      throw ShapeError(std::string(op) + ": image " + str(R) + "x" + str(C) +
                       " is not divisible into windows of " + str(Mh) + "x" + str(Mw));
    }
    if (p.shift_r < 0 || p.shift_r >= Mh || p.shift_c < 0 || p.shift_c >= Mw) {
      throw std::invalid_argument(std::string(op) + ": shift (" + str(p.shift_r) + ", " +
                                  str(p.shift_c) + ") must lie in [0, window)");
    }
    const int64_t nW = (R / Mh) * (C / Mw);
    if (B % nW != 0) {
      throw ShapeError(std::string(op) + ": batch " + str(B) + " is not images x " + str(nW) +
                       " windows");
    }
    ba.shift = true;
    ba.shift_r = static_cast<int>(p.shift_r);
    ba.shift_c = static_cast<int>(p.shift_c);
    ba.image_rows = static_cast<int>(R);
    ba.image_cols = static_cast<int>(C);
  }
}

}  // namespace

void attention_forward(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionParams& p) {
  const char* op = "cuda::attention_forward";
  check_qkv(op, out, q, k, v);
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), hd = q.size(3);
  AttnArgs args{};
  args.q = q.raw();
  args.k = k.raw();
  args.v = v.raw();
  args.out = out.raw();
  args.B = static_cast<int>(B);
  args.H = static_cast<int>(H);
  args.N = static_cast<int>(N);
  args.scale = p.scale;
  args.bias.B = args.B;
  args.bias.H = args.H;
  args.bias.N = args.N;
  set_dense_terms(op, args.bias, p, B, H, N);
  set_positional_terms(op, args, p, q);
  require_cuda(op);
  if (B * H == 0 || N == 0) return;
  const AttnBiasArgs& ba = args.bias;

  // ---- launch
  const size_t dyn = args.stage_table ? static_cast<size_t>(ba.table_rows) * sizeof(float) : 0;
  if (q.dtype() == DType::f32) {
    const dim3 grid(static_cast<unsigned>(B * H),
                    static_cast<unsigned>((N + kF32Rows - 1) / kF32Rows));
    if (hd == 32) launch(attention_f32_kernel<32>, "attention_f32_kernel<32>", grid, dyn, args);
    if (hd == 64) launch(attention_f32_kernel<64>, "attention_f32_kernel<64>", grid, dyn, args);
    if (hd == 128) launch(attention_f32_kernel<128>, "attention_f32_kernel<128>", grid, dyn, args);
    return;
  }
  if (compute_capability() < 80) {
    throw std::runtime_error(std::string(op) +
                             ": bf16 attention needs tensor cores of sm_80 or newer");
  }
  const dim3 grid(static_cast<unsigned>(B * H),
                  static_cast<unsigned>((N + kBf16Rows - 1) / kBf16Rows));
  if (hd == 32)
    launch(attention_bf16_kernel<32, 64>, "attention_bf16_kernel<32, 64>", grid, dyn, args);
  if (hd == 64)
    launch(attention_bf16_kernel<64, 64>, "attention_bf16_kernel<64, 64>", grid, dyn, args);
  if (hd == 128)
    launch(attention_bf16_kernel<128, 32>, "attention_bf16_kernel<128, 32>", grid, dyn, args);
}

}  // namespace vitpe::cuda
