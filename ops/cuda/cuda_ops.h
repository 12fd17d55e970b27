// The CUDA backend: the forward ops a ViT or Swin inference pass needs, on device tensors.
//
// Conventions are those of ops/ops.h (forward only; CUDA is for inference):
// - Outputs are preallocated by the caller with the exact shape (ShapeError otherwise).
// - Every tensor is on the CUDA device; activations are f32 or bf16 and all activations of one
//   call share a dtype. Weights of linear/patch embedding have the activations' dtype;
//   LayerNorm's gamma/beta may be f32 or the activations' dtype. Compute is f32 throughout
//   (bf16 only for storage and tensor-core inputs).
// - All work is queued on the legacy default stream: a later copy to the host (Tensor::to,
//   copy_from) waits for it. `synchronize()` waits explicitly (benchmarks).
// - Every CUDA call and launch is checked; failures throw std::runtime_error with file:line.
// The fused attention kernel and its in-kernel encodings are declared at the end.
#pragma once

#include <cstdint>
#include <string>

#include "ops/attention_terms.h"
#include "ops/ops.h"
#include "ops/tensor.h"

namespace vitpe::cuda {

// ---- device -------------------------------------------------------------------------------------
// Waits for all queued work (checked; reports asynchronous kernel errors).
void synchronize();
// "NVIDIA H200 (sm_90, 132 SMs, 140 GiB)"; throws when no device is present.
std::string device_summary();
// Compute capability major*10 + minor of the current device (e.g. 90).
int compute_capability();

// ---- conversion ---------------------------------------------------------------------------------
// dst = src with dtype conversion (f32 <-> bf16, round to nearest even; same dtype copies).
// Same numel; both on the device.
void convert(Tensor& dst, const Tensor& src);

// ---- linear (cuBLASLt) --------------------------------------------------------------------------
// x: [..., K], w: [N, K], b: [N] or undefined, residual: y's shape or undefined
// -> y: [..., N] = act(x w^T + b) + residual. The bias (and the residual when act is none) are
// fused into the cuBLASLt epilogue; GELU is exact (erf) in our own kernel, because cuBLASLt's
// GELU epilogue is the tanh approximation. f32 GEMMs run in full f32 (no TF32).
// y may alias residual (y += ...), not x.
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                    Act act = Act::none, const Tensor& residual = {});

// ---- patch embedding (im2col kernel + GEMM) -----------------------------------------------------
// x: [B, C, H, W] (H, W multiples of p), w: [D, C, p, p], b: [D] or undefined
// -> y: [B, (H/p)*(W/p), D], tokens in row-major grid order.
void patch_embed_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);

// ---- layernorm / elementwise / pooling ----------------------------------------------------------
// x: [..., D], gamma/beta: [D] -> y: [..., D]. y may alias x.
void layernorm_forward(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       float eps);
// Exact GELU (erf). y may alias x.
void gelu_forward(Tensor& y, const Tensor& x);
// y = a + b (same shapes and dtype; y may alias a or b).
void add_forward(Tensor& y, const Tensor& a, const Tensor& b);
// x: [B, N, D] -> y: [B, D] = mean of x[:, start:, :].
void mean_tokens_forward(Tensor& y, const Tensor& x, int64_t start = 0);

// ---- token sequences ----------------------------------------------------------------------------
// prefix: [P, D] f32 or undefined (P = 0), x: [B, Np, D], table: [P + Np, D] f32, [Np, D] f32 (the
// patch rows only) or undefined -> y: [B, P + Np, D] = the prefix rows, then x's rows, of every
// image, plus the table (ViT's learned prefix tokens and absolute position table). y may alias x
// only when P = 0.
void assemble_tokens_forward(Tensor& y, const Tensor& prefix, const Tensor& x, const Tensor& table);
// x: [B, N, D] -> y: [B, T, D] = x[:, start:start+T, :] (class-token pooling: T = 1, start = 0).
void select_tokens_forward(Tensor& y, const Tensor& x, int64_t start);

// ---- head layout --------------------------------------------------------------------------------
// qkv: [B, N, 3*H*hd] (rows [q | k | v], head h at h*hd inside each) -> q, k, v: [B, H, N, hd].
void split_heads_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t heads);
// o: [B, H, N, hd] -> y: [B, N, H*hd].
void merge_heads_forward(Tensor& y, const Tensor& o);

// ---- Swin windows -------------------------------------------------------------------------------
// x: [B, R*C, D] (an R x C token grid, row-major) -> windows: [B*(R/Mh)*(C/Mw), Mh*Mw, D]. The
// grid is first rolled by (-shift_r, -shift_c) as torch.roll(x, -s): window token (r, c) of the
// rolled grid is x[(r + shift_r) mod R, (c + shift_c) mod C]. Windows are ordered image-major, then
// window row, then window column (timm's window_partition).
void window_partition_forward(Tensor& windows, const Tensor& x, int64_t rows, int64_t cols,
                              int64_t win_rows, int64_t win_cols, int64_t shift_r = 0,
                              int64_t shift_c = 0);
// The inverse: windows -> x (window_reverse, then roll by (+shift_r, +shift_c)).
void window_merge_forward(Tensor& x, const Tensor& windows, int64_t rows, int64_t cols,
                          int64_t win_rows, int64_t win_cols, int64_t shift_r = 0,
                          int64_t shift_c = 0);
// Swin patch merging's gather: x: [B, R*C, D] (R, C even) -> y: [B, (R/2)*(C/2), 4D] with the
// 2x2 neighbourhood concatenated in the order (row0,col0), (row1,col0), (row0,col1),
// (row1,col1) (timm's x0, x1, x2, x3). LayerNorm(4D) and the reduction linear follow.
void patch_merge_forward(Tensor& y, const Tensor& x, int64_t rows, int64_t cols);

// ---- fused attention -------------------------------------------------------------------------
// What the attention kernel adds to the logits and how it rotates q and k. All tensors are f32
// on the device. Any combination may be given; each present term is added.
struct AttentionParams {
  float scale = 1.0f;  // logits = q k^T * scale + bias terms

  // Dense additive bias [H, N, N], the same for every batch entry (any encoding).
  Tensor bias;
  // Dense mask [W, N, N]; batch entry b uses mask[b % W] (as ops.h attention_forward).
  Tensor mask;

  // An attention encoding's terms (AttentionEncoding::terms(geom).to(Device::cuda)): the
  // geometry (prefix tokens, then a window_rows x window_cols grid; N = prefix + Mh*Mw), the
  // relative-position table, ALiBi-2D slopes and RoPE frequencies, read inside the kernel
  // with the functions of ops/attention_terms.h.
  AttentionTerms terms;

  // Swin's shift mask, computed in the kernel: batch entry b is window b % nW of an image of
  // image_rows x image_cols tokens (in the rolled frame, nW = (R/Mh)(C/Mw)); tokens in different
  // regions of the slices [0, R-Mh), [R-Mh, R-shift), [R-shift, R) (per axis) get -100.
  // Active when shift_r or shift_c is non-zero; needs prefix 0 and the terms' window.
  int64_t shift_r = 0, shift_c = 0;
  int64_t image_rows = 0, image_cols = 0;
};

// q, k, v: [B, H, N, hd] (hd 32, 64 or 128; all f32 or all bf16) -> out: [B, H, N, hd]
// = softmax(rope(q) rope(k)^T * scale + bias terms) v, tiled over queries and keys with an
// online softmax: no N x N matrix in global memory. f32: CUDA cores, f32 throughout.
// bf16: tensor cores (mma.sync m16n8k16, f32 accumulation; needs sm_80 or newer).
// out must not overlap q, k or v.
void attention_forward(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionParams& params);

}  // namespace vitpe::cuda
