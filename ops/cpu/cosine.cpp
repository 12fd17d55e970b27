// Swin V2's scaled cosine attention inputs (ops/ops.h): q and k normalised per token and head,
// q scaled by the head's exp(min(logit_scale, max_log)). One pass per row of hd floats; the
// logit_scale gradient sums per-row terms in row order after the parallel part, so it does not
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_profile.h"
#include "ops/ops.h"
#include "ops/util.h"

namespace vitpe {

namespace {

constexpr double kNormEps = 1e-12;  // F.normalize's eps

// q, k [B, H, N, hd] of the same shape, logit_scale with H values -> H.
int64_t check_cosine(const char* op, const Tensor& q, const Tensor& k, const Tensor& logit_scale) {
  check_cpu_f32(op, "q", q);
  check_cpu_f32(op, "k", k);
  check_cpu_f32(op, "logit_scale", logit_scale);
  if (q.ndim() != 4 || q.numel() == 0) {
    throw ShapeError(std::string(op) + ": expected q of shape [B, H, N, hd], found " +
                     q.shape().str());
  }
  check_same(op, "k", k, "q", q);
  if (logit_scale.numel() != q.size(1)) {
    throw ShapeError(std::string(op) + ": expected logit_scale with " + std::to_string(q.size(1)) +
                     " values (one per head of q " + q.shape().str() + "), found " +
                     logit_scale.shape().str());
  }
  return q.size(1);
}

double head_scale(const Tensor& logit_scale, int64_t h, float max_log) {
  return std::exp(
      std::min(static_cast<double>(logit_scale.f32()[h]), static_cast<double>(max_log)));
}

}  // namespace

void cosine_qk_forward(Tensor& qn, Tensor& kn, const Tensor& q, const Tensor& k,
                       const Tensor& logit_scale, float max_log) {
  const OpScope scope(OpClass::elementwise);
  const char* op = "cosine_qk_forward";
  const int64_t H = check_cosine(op, q, k, logit_scale);
  check_same(op, "qn", qn, "q", q);
  check_same(op, "kn", kn, "k", k);
  const int64_t N = q.size(2), hd = q.size(3), rows = q.numel() / hd;
  std::vector<float> scale(H);
  for (int64_t h = 0; h < H; ++h)
    scale[h] = static_cast<float>(head_scale(logit_scale, h, max_log));
  const float* pq = q.f32();
  const float* pk = k.f32();
  float* oq = qn.f32();
  float* ok = kn.f32();
#pragma omp parallel for schedule(static) if (rows * hd > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = pq + r * hd;
    const float* kr = pk + r * hd;
    float sq = 0, sk = 0;
#pragma omp simd reduction(+ : sq, sk)
    for (int64_t d = 0; d < hd; ++d) {
      sq += qr[d] * qr[d];
      sk += kr[d] * kr[d];
    }
    const float fq = scale[(r / N) % H] / std::max(std::sqrt(sq), static_cast<float>(kNormEps));
    const float fk = 1.0f / std::max(std::sqrt(sk), static_cast<float>(kNormEps));
#pragma omp simd
    for (int64_t d = 0; d < hd; ++d) {
      oq[r * hd + d] = qr[d] * fq;
      ok[r * hd + d] = kr[d] * fk;
    }
  }
}

void cosine_qk_backward(Tensor& dq, Tensor& dk, Tensor& dlogit_scale, const Tensor& dqn,
                        const Tensor& dkn, const Tensor& q, const Tensor& k,
                        const Tensor& logit_scale, float max_log) {
  const OpScope scope(OpClass::elementwise);
  const char* op = "cosine_qk_backward";
  const int64_t H = check_cosine(op, q, k, logit_scale);
  check_same(op, "dqn", dqn, "q", q);
  check_same(op, "dkn", dkn, "k", k);
  check_same(op, "dq", dq, "q", q);
  check_same(op, "dk", dk, "k", k);
  check_same(op, "dlogit_scale", dlogit_scale, "logit_scale", logit_scale);
  const int64_t N = q.size(2), hd = q.size(3), rows = q.numel() / hd;
  // y = x / n (n = |x|, above eps): dx = (dy - y (y . dy)) / n; at the eps floor y = x / eps is
  // linear, dx = dy / eps. For qn = s y: dy = s dqn, and ds = sum over rows of (y . dqn).
  std::vector<double> row_ds(rows);
  const float* pq = q.f32();
  const float* pk = k.f32();
  const float* gq = dqn.f32();
  const float* gk = dkn.f32();
  float* oq = dq.f32();
  float* ok = dk.f32();
  auto unit_backward = [hd](float* dx, const float* x, const float* dy, double s, double* ydy) {
    double n2 = 0;
    for (int64_t d = 0; d < hd; ++d) n2 += static_cast<double>(x[d]) * x[d];
    const double n = std::sqrt(n2);
    double dot = 0;  // y . dy with y = x / max(n, eps)
    const double denom = std::max(n, kNormEps);
    for (int64_t d = 0; d < hd; ++d) dot += x[d] / denom * dy[d];
    if (ydy) *ydy = dot;
    for (int64_t d = 0; d < hd; ++d) {
      const double y = x[d] / denom;
      const double g = n > kNormEps ? (dy[d] - y * dot) / n : dy[d] / kNormEps;
      dx[d] = static_cast<float>(s * g);
    }
  };
#pragma omp parallel for schedule(static) if (rows * hd > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const double s = head_scale(logit_scale, (r / N) % H, max_log);
    unit_backward(oq + r * hd, pq + r * hd, gq + r * hd, s, &row_ds[r]);
    unit_backward(ok + r * hd, pk + r * hd, gk + r * hd, 1.0, nullptr);
  }
  for (int64_t h = 0; h < H; ++h) {
    const double ls = logit_scale.f32()[h];
    if (ls >= max_log) continue;  // clamped: no gradient, as torch.clamp
    double ds = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if ((r / N) % H == h) ds += row_ds[r];
    }
    dlogit_scale.f32()[h] += static_cast<float>(ds * std::exp(ls));  // d exp(ls) / d ls
  }
}

}  // namespace vitpe
