// Scaled dot-product attention on the CPU: softmax(q k^T * scale + bias + mask) v, forward and
// backward, for ViT (one window: the whole grid) and Swin (B = images * windows, shift mask).
//
// The two products per direction are batched oneDNN matmuls over the B*H (batch, head) pairs
// (cpu::matmul, cached primitives); the row-wise parts (bias + mask + softmax forward, the
// softmax Jacobian backward) are vectorised loops over rows on the OpenMP threads. The logits
// live in `probs` (training) or in a per-thread scratch buffer (inference), so a steady-state
// call allocates nothing.
#include <algorithm>
#include <string>
#include <utility>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/vec_math.h"
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

// One row of logits -> probabilities, in place: s = softmax(s + bias + mask). bias and mask
// are rows of the same length or null.
VITPE_AVX2 void softmax_row_avx2(float* s, const float* bias, const float* mask, int64_t n) {
  cpu::softmax_row<cpu::f32x8>(s, s, 1.0f, bias, mask, n);
}
void softmax_row_base(float* s, const float* bias, const float* mask, int64_t n) {
  cpu::softmax_row<cpu::f32x4>(s, s, 1.0f, bias, mask, n);
}

// One row of the softmax backward, in place: dp -> ds = p * (dp - sum(dp * p)).
VITPE_INLINE void softmax_grad_row(float* dp, const float* p, int64_t n) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += dp[j] * p[j];
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - dot);
}

}  // namespace

void attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                       const Tensor& v, float scale, const Tensor& bias, const Tensor& mask) {
  const char* op = "attention_forward";
  const Dims d = check_qkv(op, q, k, v);
  check_cpu_f32(op, "out", out);
  check_shape(op, "out", out, q.shape());
  const int64_t n = d.n, nn = d.n * d.n;
  const float* pbias = nullptr;
  if (bias.defined()) {
    check_cpu_f32(op, "bias", bias);
    check_shape(op, "bias", bias, Shape{d.h, n, n});
    pbias = bias.f32();
  }
  const float* pmask = nullptr;
  int64_t windows = 1;
  if (mask.defined()) {
    check_cpu_f32(op, "mask", mask);
    if (mask.ndim() != 3 || mask.size(1) != n || mask.size(2) != n || mask.size(0) <= 0 ||
        d.b % mask.size(0) != 0) {
      throw ShapeError(std::string(op) + ": expected mask of shape [W, " + std::to_string(n) +
                       ", " + std::to_string(n) + "] with W dividing the batch " +
                       std::to_string(d.b) + " (q is " + q.shape().str() + "), found " +
                       mask.shape().str());
    }
    windows = mask.size(0);
    pmask = mask.f32();
  }
  float* p;
  if (probs.defined()) {
    check_cpu_f32(op, "probs", probs);
    check_shape(op, "probs", probs, Shape{d.b, d.h, n, n});
    p = probs.f32();
  } else {
    p = cpu::scratch_f32(cpu::ScratchSlot::attention_0, static_cast<size_t>(d.bh() * nn));
  }
  if (d.bh() == 0 || n == 0) return;

  // s = q k^T * scale: [BH, N, hd] x [BH, N, hd]^T -> [BH, N, N]
  cpu::matmul({.batch = d.bh(), .m = n, .n = n, .k = d.hd, .trans_b = true, .alpha = scale},
              q.f32(), k.f32(), p);
  // p = softmax(s + bias[h] + mask[b % W]) row by row
  const bool avx2 = cpu::cpu_has_avx2_fma();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < d.bh() * n; ++r) {
    const int64_t bh = r / n, i = r % n, bi = bh / d.h, h = bh % d.h;
    const float* brow = pbias ? pbias + h * nn + i * n : nullptr;
    const float* mrow = pmask ? pmask + (bi % windows) * nn + i * n : nullptr;
    if (avx2)
      softmax_row_avx2(p + r * n, brow, mrow, n);
    else
      softmax_row_base(p + r * n, brow, mrow, n);
  }
  // out = p v: [BH, N, N] x [BH, N, hd] -> [BH, N, hd]
  cpu::matmul({.batch = d.bh(), .m = n, .n = d.hd, .k = n}, p, v.f32(), out.f32());
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        float scale) {
  const char* op = "attention_backward";
  const Dims d = check_qkv(op, q, k, v);
  const int64_t n = d.n, nn = d.n * d.n;
  check_cpu_f32(op, "dout", dout);
  check_shape(op, "dout", dout, q.shape());
  check_cpu_f32(op, "probs", probs);
  check_shape(op, "probs", probs, Shape{d.b, d.h, n, n});
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}}) {
    if (!t->defined()) continue;
    check_cpu_f32(op, name, *t);
    check_shape(op, name, *t, q.shape());
  }
  if (dbias.defined()) {
    check_cpu_f32(op, "dbias", dbias);
    check_shape(op, "dbias", dbias, Shape{d.h, n, n});
  }
  if (d.bh() == 0 || n == 0) return;
  const float* p = probs.f32();

  // dv += p^T dout: [BH, N, N]^T x [BH, N, hd] -> [BH, N, hd]
  if (dv.defined()) {
    cpu::matmul({.batch = d.bh(), .m = n, .n = d.hd, .k = n, .trans_a = true, .accumulate = true},
                p, dout.f32(), dv.f32());
  }
  if (!dq.defined() && !dk.defined() && !dbias.defined()) return;

  // dp = dout v^T: [BH, N, hd] x [BH, N, hd]^T -> [BH, N, N], then ds = p * (dp - rowsum(dp p))
  float* ds = cpu::scratch_f32(cpu::ScratchSlot::attention_1, static_cast<size_t>(d.bh() * nn));
  cpu::matmul({.batch = d.bh(), .m = n, .n = n, .k = d.hd, .trans_b = true}, dout.f32(), v.f32(),
              ds);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < d.bh() * n; ++r) softmax_grad_row(ds + r * n, p + r * n, n);

  // dbias += sum over the batch of ds (the bias is added unscaled to every batch entry). Each
  // thread owns rows of dbias and sums the batch in order: deterministic.
  if (dbias.defined()) {
    float* db = dbias.f32();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < d.h * n; ++r) {
      float* dst = db + r * n;
      for (int64_t bi = 0; bi < d.b; ++bi) {
        const float* src = ds + bi * d.h * nn + r * n;
        for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
      }
    }
  }
  // dq += ds k * scale: [BH, N, N] x [BH, N, hd] -> [BH, N, hd]
  if (dq.defined()) {
    cpu::matmul({.batch = d.bh(), .m = n, .n = d.hd, .k = n, .alpha = scale, .accumulate = true},
                ds, k.f32(), dq.f32());
  }
  // dk += ds^T q * scale: [BH, N, N]^T x [BH, N, hd] -> [BH, N, hd]
  if (dk.defined()) {
    cpu::matmul({.batch = d.bh(),
                 .m = n,
                 .n = d.hd,
                 .k = n,
                 .trans_a = true,
                 .alpha = scale,
                 .accumulate = true},
                ds, q.f32(), dk.f32());
  }
}

}  // namespace vitpe
