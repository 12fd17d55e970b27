// Scaled dot-product attention on the CPU: softmax(q k^T * scale + bias + mask) v, forward and
// backward, for ViT (one window: the whole grid) and Swin (B = images * windows, shift mask).
//
// Fused per (batch, head) pair: each thread takes whole pairs and, for one pair, computes the
// N x N logits with a single-threaded oneDNN sgemm, turns them into probabilities row by row
// (bias, mask, SIMD softmax) and multiplies by v while the N x N block is still in its L2
// cache (197 x 197 floats = 152 KiB). Compared with three passes over all pairs (batched
// matmul, softmax, batched matmul) this reads and writes the B*H*N*N logits once instead of
// four times and has one parallel region instead of three. Inference on AVX-512 (no probabilities
// kept) runs the same tasks on vitpe's own register tiles instead of sgemm
// (ops/cpu/attention_tiles.h). The probabilities land in `probs` (training) or in a per-thread N x
// N scratch block (inference), so a steady-state call allocates no tensor storage. Backward is
// fused the same way: dv += P^T dout, dP = dout v^T, dS = P * (dP - rowsum(dP * P)), dq += dS k *
// scale, dk += dS^T q * scale; dbias (sum of dS over the batch) needs every pair's dS, so only then
// dS is kept for a final deterministic reduction over the batch.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

#include "ops/cpu/attention_tiles.h"
#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/linear_impl.h"
#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

struct Dims {
  int64_t b, h, n, hd;
  int64_t bh() const { return b * h; }
};

Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_cpu_f32(op, "q", q);
  check_cpu_f32(op, "k", k);
  check_cpu_f32(op, "v", v);
  if (q.ndim() != 4) {
    throw ShapeError(std::string(op) + ": expected q of shape [B, H, N, hd], found " +
                     q.shape().str());
  }
  check_shape(op, "k", k, q.shape());
  check_shape(op, "v", v, q.shape());
  return {q.size(0), q.size(1), q.size(2), q.size(3)};
}

// qkv: [B, N, 3 * H * hd] with H = heads -> its dimensions (throws naming qkv otherwise).
Dims check_tokens_qkv(const char* op, const Tensor& qkv, int64_t heads) {
  check_cpu_f32(op, "qkv", qkv);
  if (heads <= 0 || qkv.ndim() != 3 || qkv.size(2) % (3 * heads) != 0 || qkv.size(2) == 0) {
    throw ShapeError(std::string(op) + ": expected qkv of shape [B, N, 3 * H * hd] with H = " +
                     std::to_string(heads) + " and hd > 0, found " + qkv.shape().str());
  }
  return {qkv.size(0), heads, qkv.size(1), qkv.size(2) / 3 / heads};
}

// One row of logits -> probabilities, in place: s = softmax(s + bias + mask). bias and mask
// are rows of the same length or null.
VITPE_AVX512 void softmax_row_avx512(float* s, const float* bias, const float* mask, int64_t n) {
  cpu::softmax_row<cpu::f32x16>(s, s, 1.0f, bias, mask, n);
}
VITPE_AVX2 void softmax_row_avx2(float* s, const float* bias, const float* mask, int64_t n) {
  cpu::softmax_row<cpu::f32x8>(s, s, 1.0f, bias, mask, n);
}
void softmax_row_base(float* s, const float* bias, const float* mask, int64_t n) {
  cpu::softmax_row<cpu::f32x4>(s, s, 1.0f, bias, mask, n);
}

// One row of the softmax backward, in place: dp -> ds = p * (dp - sum(dp * p)).
template <class V>
VITPE_INLINE void softmax_grad_row(float* dp, const float* p, int64_t n) {
  constexpr int64_t w = cpu::kLanes<V>;
  const int64_t nv = n / w * w;
  V vdot = V{};
  float dot = 0.0f;
  for (int64_t j = 0; j < nv; j += w) {
    V a, b;
    cpu::load(a, dp + j);
    cpu::load(b, p + j);
    vdot = vdot + a * b;
  }
  for (int64_t j = nv; j < n; ++j) dot += dp[j] * p[j];
  dot += cpu::hsum(vdot);
  for (int64_t j = 0; j < nv; j += w) {
    V a, b;
    cpu::load(a, dp + j);
    cpu::load(b, p + j);
    a = b * (a - dot);
    cpu::store(dp + j, a);
  }
  for (int64_t j = nv; j < n; ++j) dp[j] = p[j] * (dp[j] - dot);
}
VITPE_AVX2 void softmax_grad_rows_avx2(float* dp, const float* p, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i) softmax_grad_row<cpu::f32x8>(dp + i * n, p + i * n, n);
}
void softmax_grad_rows_base(float* dp, const float* p, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i) softmax_grad_row<cpu::f32x4>(dp + i * n, p + i * n, n);
}

// Row-major C = alpha op(A) op(B) + beta C on the calling thread (oneDNN's sgemm runs
// sequentially inside a parallel region). Returns false on a oneDNN error: callers are inside
// OpenMP regions, where an exception cannot propagate.
bool gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
}

void throw_if_failed(const char* op, const std::atomic<bool>& failed) {
  if (failed.load()) throw std::runtime_error(std::string(op) + ": oneDNN sgemm failed");
}

}  // namespace

namespace {

// Where the rows of q, k, v and out of one (batch, head) pair live: the pair (bi, h) of a starts
// at a + bi * batch + h * head, and its N rows are ld apart.
struct Layout {
  int64_t batch, head, ld;
  int64_t at(int64_t bi, int64_t h) const { return bi * batch + h * head; }
};

struct ForwardArgs {
  const float *q, *k, *v;
  float* out;
  Layout lq, lk, lv, lo;
  Dims d;
  float scale;
  const float* bias;  // [H, N, N] or nullptr
  const float* mask;  // [W, N, N] or nullptr
  int64_t windows;
  float* probs;  // [B, H, N, N] or nullptr (inference: a per-thread block)
};

void forward_pairs(const char* op, const ForwardArgs& a) {
  const Dims& d = a.d;
  const int64_t n = d.n, nn = n * n;
  // Rows of one pair are independent in the forward, so when there are fewer pairs than
  // threads (batch-1 inference on a many-core machine) each pair is split into row blocks; at
  // least kMinRows rows per block keep the sgemm calls efficient. Threads take the tasks as they
  // finish the last one: a thread that shares its core with another process does fewer. Under
  // FixedWorkSplit the split is for kFixedTasks whatever the thread count (sgemm's bits for a row
  // can depend on how many rows it was given).
  constexpr int64_t kMinRows = 32, kFixedTasks = 64;
  const int64_t threads = FixedWorkSplit::active() ? kFixedTasks : omp_get_max_threads();
  const int64_t splits =
      std::clamp<int64_t>((threads + d.bh() - 1) / d.bh(), 1, std::max<int64_t>(1, n / kMinRows));
  const int64_t rows = (n + splits - 1) / splits;
  // The softmax rows' kernel, chosen once for the call.
  const auto softmax_row = cpu::cpu_has_avx512()     ? softmax_row_avx512
                           : cpu::cpu_has_avx2_fma() ? softmax_row_avx2
                                                     : softmax_row_base;
  // Inference on AVX-512 runs vitpe's own register tiles (ops/cpu/attention_tiles.h): a thread
  // packs a pair's keys and values once for the tasks of that pair it takes in a row.
  const bool tiles = !a.probs && cpu::attention_tiles_take(d.hd);
  const int64_t np = cpu::attention_tiles_keys(n),
                packed_size = cpu::attention_tiles_packed(n, d.hd);
  std::atomic<bool> failed{false};
#pragma omp parallel
  {
    // Inference's per-thread work space: the tiles' packed pair and logits block, or sgemm's
    // N x N block.
    float* work =
        a.probs ? nullptr
                : cpu::scratch_f32(
                      cpu::ScratchSlot::attention_0,
                      static_cast<size_t>(tiles ? packed_size + cpu::kAttentionRowBlock * np : nn));
    int64_t packed = -1;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < d.bh() * splits; ++task) {
      const int64_t bh = task / splits, i0 = task % splits * rows, m = std::min(n, i0 + rows) - i0;
      const int64_t bi = bh / d.h, h = bh % d.h;
      if (m <= 0) continue;
      // The bias and mask rows of rows [i0, i0 + m), n apart.
      const float* bias = a.bias ? a.bias + h * nn + i0 * n : nullptr;
      const float* mask = a.mask ? a.mask + (bi % a.windows) * nn + i0 * n : nullptr;
      const float* q = a.q + a.lq.at(bi, h) + i0 * a.lq.ld;
      float* out = a.out + a.lo.at(bi, h) + i0 * a.lo.ld;
      if (tiles) {
        if (bh != packed) {
          cpu::attention_pack(work, work + np * d.hd, a.k + a.lk.at(bi, h), a.lk.ld,
                              a.v + a.lv.at(bi, h), a.lv.ld, n, d.hd);
          packed = bh;
        }
        cpu::attention_tiles_rows(out, a.lo.ld, q, a.lq.ld, work, work + np * d.hd, m, n, d.hd,
                                  a.scale, bias, n, mask, n, work + packed_size);
        continue;
      }
      // s holds logit rows [i0, i0 + m) of this pair.
      float* s = a.probs ? a.probs + bh * nn + i0 * n : work;
      // s = q k^T * scale: [m, hd] x [N, hd]^T -> [m, N]
      bool ok = gemm('N', 'T', m, n, d.hd, a.scale, q, a.lq.ld, a.k + a.lk.at(bi, h), a.lk.ld, 0.0f,
                     s, n);
      // p = softmax(s + bias[h] + mask[b % W]) row by row
      for (int64_t i = 0; i < m; ++i) {
        softmax_row(s + i * n, bias ? bias + i * n : nullptr, mask ? mask + i * n : nullptr, n);
      }
      // out = p v: [m, N] x [N, hd] -> [m, hd]
      ok = ok && gemm('N', 'N', m, d.hd, n, 1.0f, s, n, a.v + a.lv.at(bi, h), a.lv.ld, 0.0f, out,
                      a.lo.ld);
      if (!ok) failed = true;
    }
  }
  throw_if_failed(op, failed);
}

// bias: [H, N, N] and mask: [W, N, N] with W dividing the batch B (undefined: none); returns W.
int64_t check_bias_mask(const char* op, const Tensor& bias, const Tensor& mask, const Dims& d,
                        const Tensor& q) {
  const int64_t n = d.n;
  if (bias.defined()) {
    check_cpu_f32(op, "bias", bias);
    check_shape(op, "bias", bias, Shape{d.h, n, n});
  }
  if (!mask.defined()) return 1;
  check_cpu_f32(op, "mask", mask);
  if (mask.ndim() != 3 || mask.size(1) != n || mask.size(2) != n || mask.size(0) <= 0 ||
      d.b % mask.size(0) != 0) {
    throw ShapeError(std::string(op) + ": expected mask of shape [W, " + std::to_string(n) + ", " +
                     std::to_string(n) + "] with W dividing the batch " + std::to_string(d.b) +
                     " (q is " + q.shape().str() + "), found " + mask.shape().str());
  }
  return mask.size(0);
}

}  // namespace

void attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                       const Tensor& v, float scale, const Tensor& bias, const Tensor& mask) {
  const char* op = "attention_forward";
  const Dims d = check_qkv(op, q, k, v);
  check_cpu_f32(op, "out", out);
  check_shape(op, "out", out, q.shape());
  const int64_t n = d.n, nn = d.n * d.n;
  // The two products' work: q k^T and p v, 2 N^2 hd each per head.
  const OpScope scope(OpClass::attention, 4.0 * static_cast<double>(d.b * d.h) * nn * d.hd);
  const int64_t windows = check_bias_mask(op, bias, mask, d, q);
  float* p_all = nullptr;
  if (probs.defined()) {
    check_cpu_f32(op, "probs", probs);
    check_shape(op, "probs", probs, Shape{d.b, d.h, n, n});
    p_all = probs.f32();
  }
  if (d.bh() == 0 || n == 0) return;
  const Layout tight{d.h * n * d.hd, n * d.hd, d.hd};  // [B, H, N, hd]
  forward_pairs(op, {q.f32(), k.f32(), v.f32(), out.f32(), tight, tight, tight, tight, d, scale,
                     bias.defined() ? bias.f32() : nullptr, mask.defined() ? mask.f32() : nullptr,
                     windows, p_all});
}

void attention_forward_tokens(Tensor& out, const Tensor& qkv, int64_t heads, float scale,
                              const Tensor& bias, const Tensor& mask) {
  Tensor no_probs;
  attention_forward_tokens(out, no_probs, qkv, heads, scale, bias, mask);
}

void attention_forward_tokens(Tensor& out, Tensor& probs, const Tensor& qkv, int64_t heads,
                              float scale, const Tensor& bias, const Tensor& mask) {
  const char* op = "attention_forward_tokens";
  const Dims d = check_tokens_qkv(op, qkv, heads);
  const int64_t dim = d.h * d.hd;
  check_cpu_f32(op, "out", out);
  check_shape(op, "out", out, Shape{d.b, d.n, dim});
  if (out.raw() == qkv.raw()) {
    throw std::invalid_argument(std::string(op) + ": out must not be qkv itself");
  }
  const OpScope scope(OpClass::attention, 4.0 * static_cast<double>(d.b * d.h) * d.n * d.n * d.hd);
  const int64_t windows = check_bias_mask(op, bias, mask, d, qkv);
  if (probs.defined()) {
    check_cpu_f32(op, "probs", probs);
    check_shape(op, "probs", probs, Shape{d.b, d.h, d.n, d.n});
  }
  if (d.bh() == 0 || d.n == 0) return;
  const float* base = qkv.f32();
  const Layout in{d.n * 3 * dim, d.hd, 3 * dim}, to{d.n * dim, d.hd, dim};  // [B, N, (3) H hd]
  forward_pairs(op, {base, base + dim, base + 2 * dim, out.f32(), in, in, in, to, d, scale,
                     bias.defined() ? bias.f32() : nullptr, mask.defined() ? mask.f32() : nullptr,
                     windows, probs.defined() ? probs.f32() : nullptr});
}

namespace {

struct BackwardArgs {
  const float *q, *k, *v, *dout, *probs;
  float *dq, *dk, *dv;  // each may be null
  Layout lq, lk, lv, lo, ldq, ldk, ldv;
  Dims d;
  float scale;
  float beta;    // 1: the gradients are added to dq, dk, dv; 0: they overwrite them
  float* dbias;  // [H, N, N] (accumulated) or nullptr
};

// column_sums: [3, H * hd] (accumulated) or nullptr: the sums over all rows of dq, dk and dv as
// written (beta 0), head h at h * hd in each third.
void backward_pairs(const char* op, const BackwardArgs& a, float* column_sums = nullptr) {
  const Dims& d = a.d;
  const int64_t n = d.n, nn = n * n;
  const bool need_ds = a.dq || a.dk || a.dbias;
  // dbias needs every pair's dS after the loop; otherwise one N x N block per thread will do.
  float* ds_all =
      a.dbias ? cpu::scratch_f32(cpu::ScratchSlot::attention_1, static_cast<size_t>(d.bh() * nn))
              : nullptr;
  // Each pair's column sums of dq, dk and dv: [B * H, 3, hd].
  float* pair_sums = column_sums ? cpu::scratch_f32(cpu::ScratchSlot::attention_2,
                                                    static_cast<size_t>(d.bh() * 3 * d.hd))
                                 : nullptr;
  const bool avx2 = cpu::cpu_has_avx2_fma();
  std::atomic<bool> failed{false};
#pragma omp parallel
  {
    float* ds_local = (need_ds && !ds_all)
                          ? cpu::scratch_f32(cpu::ScratchSlot::attention_1, static_cast<size_t>(nn))
                          : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < d.bh(); ++bh) {
      const int64_t bi = bh / d.h, h = bh % d.h;
      const float* p = a.probs + bh * nn;
      const float* dout = a.dout + a.lo.at(bi, h);
      bool ok = true;
      // dv (+)= p^T dout: [N, N]^T x [N, hd] -> [N, hd]
      if (a.dv) {
        ok = gemm('T', 'N', n, d.hd, n, 1.0f, p, n, dout, a.lo.ld, a.beta, a.dv + a.ldv.at(bi, h),
                  a.ldv.ld);
      }
      if (need_ds) {
        float* ds = ds_all ? ds_all + bh * nn : ds_local;
        // dp = dout v^T: [N, hd] x [N, hd]^T -> [N, N]; then ds = p * (dp - rowsum(dp * p))
        ok = ok && gemm('N', 'T', n, n, d.hd, 1.0f, dout, a.lo.ld, a.v + a.lv.at(bi, h), a.lv.ld,
                        0.0f, ds, n);
        if (avx2)
          softmax_grad_rows_avx2(ds, p, n, n);
        else
          softmax_grad_rows_base(ds, p, n, n);
        // dq (+)= ds k * scale: [N, N] x [N, hd] -> [N, hd]
        if (a.dq) {
          ok = ok && gemm('N', 'N', n, d.hd, n, a.scale, ds, n, a.k + a.lk.at(bi, h), a.lk.ld,
                          a.beta, a.dq + a.ldq.at(bi, h), a.ldq.ld);
        }
        // dk (+)= ds^T q * scale: [N, N]^T x [N, hd] -> [N, hd]
        if (a.dk) {
          ok = ok && gemm('T', 'N', n, d.hd, n, a.scale, ds, n, a.q + a.lq.at(bi, h), a.lq.ld,
                          a.beta, a.dk + a.ldk.at(bi, h), a.ldk.ld);
        }
      }
      if (!ok) failed = true;
      if (pair_sums) {
        // The pair's rows of dq, dk and dv, just written (beta 0), while they are in cache.
        const float* outs[3] = {a.dq + a.ldq.at(bi, h), a.dk + a.ldk.at(bi, h),
                                a.dv + a.ldv.at(bi, h)};
        const int64_t lds[3] = {a.ldq.ld, a.ldk.ld, a.ldv.ld};
        for (int part = 0; part < 3; ++part) {
          float* sums = pair_sums + (bh * 3 + part) * d.hd;
          if (avx2)
            cpu::column_sums_of_rows_avx2(sums, outs[part], lds[part], n, d.hd);
          else
            cpu::column_sums_of_rows_base(sums, outs[part], lds[part], n, d.hd);
        }
      }
    }
  }
  throw_if_failed(op, failed);

  // column_sums += the pairs' sums over the batch, in batch order (deterministic).
  if (pair_sums) {
    const int64_t width = d.h * d.hd;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < 3 * width; ++c) {
      // Image bi's sums for (head h, part) lie 3 H hd floats after image bi - 1's.
      const int64_t part = c / width, h = c % width / d.hd, j = c % d.hd;
      column_sums[c] += cpu::run_total(pair_sums + (h * 3 + part) * d.hd, d.b, 3 * width, j);
    }
  }

  // dbias += sum over the batch of ds (the bias is added unscaled to every batch entry). Each
  // thread owns rows of dbias and sums the batch in order: deterministic.
  if (a.dbias) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < d.h * n; ++r) {
      float* dst = a.dbias + r * n;
      for (int64_t bi = 0; bi < d.b; ++bi) {
        const float* src = ds_all + bi * d.h * nn + r * n;
        for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
      }
    }
  }
}

void check_dbias(const char* op, const Tensor& dbias, const Dims& d) {
  if (!dbias.defined()) return;
  check_cpu_f32(op, "dbias", dbias);
  check_shape(op, "dbias", dbias, Shape{d.h, d.n, d.n});
}

}  // namespace

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        float scale) {
  const char* op = "attention_backward";
  const Dims d = check_qkv(op, q, k, v);
  const int64_t n = d.n, nn = d.n * d.n;
  // dv = p^T dout, dp = dout v^T, dq = ds k, dk = ds^T q: 2 N^2 hd each per head.
  const OpScope scope(OpClass::attention, 8.0 * static_cast<double>(d.bh()) * nn * d.hd);
  check_cpu_f32(op, "dout", dout);
  check_shape(op, "dout", dout, q.shape());
  check_cpu_f32(op, "probs", probs);
  check_shape(op, "probs", probs, Shape{d.b, d.h, n, n});
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}}) {
    if (!t->defined()) continue;
    check_cpu_f32(op, name, *t);
    check_shape(op, name, *t, q.shape());
  }
  check_dbias(op, dbias, d);
  if (d.bh() == 0 || n == 0) return;
  const Layout tight{d.h * n * d.hd, n * d.hd, d.hd};  // [B, H, N, hd]
  backward_pairs(op, {q.f32(), k.f32(), v.f32(), dout.f32(), probs.f32(),
                      dq.defined() ? dq.f32() : nullptr, dk.defined() ? dk.f32() : nullptr,
                      dv.defined() ? dv.f32() : nullptr, tight, tight, tight, tight, tight, tight,
                      tight, d, scale, 1.0f, dbias.defined() ? dbias.f32() : nullptr});
}

void attention_backward_tokens(Tensor& dqkv, Tensor& dbias, const Tensor& dout, const Tensor& qkv,
                               const Tensor& probs, int64_t heads, float scale) {
  Tensor no_sums;
  attention_backward_tokens(dqkv, dbias, dout, qkv, probs, heads, scale, no_sums);
}

void attention_backward_tokens(Tensor& dqkv, Tensor& dbias, const Tensor& dout, const Tensor& qkv,
                               const Tensor& probs, int64_t heads, float scale,
                               Tensor& column_sums) {
  const char* op = "attention_backward_tokens";
  const Dims d = check_tokens_qkv(op, qkv, heads);
  const int64_t dim = d.h * d.hd, nn = d.n * d.n;
  const OpScope scope(OpClass::attention, 8.0 * static_cast<double>(d.bh()) * nn * d.hd);
  check_cpu_f32(op, "dout", dout);
  check_shape(op, "dout", dout, Shape{d.b, d.n, dim});
  check_cpu_f32(op, "probs", probs);
  check_shape(op, "probs", probs, Shape{d.b, d.h, d.n, d.n});
  check_cpu_f32(op, "dqkv", dqkv);
  check_shape(op, "dqkv", dqkv, qkv.shape());
  if (dqkv.raw() == qkv.raw()) {
    throw std::invalid_argument(std::string(op) + ": dqkv must not be qkv itself");
  }
  check_dbias(op, dbias, d);
  if (column_sums.defined()) {
    check_cpu_f32(op, "column_sums", column_sums);
    check_shape(op, "column_sums", column_sums, Shape{3 * dim});
  }
  if (d.bh() == 0 || d.n == 0) return;
  const float* base = qkv.f32();
  float* dbase = dqkv.f32();
  const Layout in{d.n * 3 * dim, d.hd, 3 * dim}, to{d.n * dim, d.hd, dim};  // [B, N, (3) H hd]
  backward_pairs(op,
                 {base, base + dim, base + 2 * dim, dout.f32(), probs.f32(), dbase, dbase + dim,
                  dbase + 2 * dim, in, in, in, to, in, in, in, d, scale, 0.0f,
                  dbias.defined() ? dbias.f32() : nullptr},
                 column_sums.defined() ? column_sums.f32() : nullptr);
}

}  // namespace vitpe
