// Attention pooling with one learned query (SigLIP's map head): for each image and head, the
// query's logits over the N tokens, their softmax, and the weighted sum of the values. One query
// per (image, head) pair is N x hd work: plain loops over pairs, each pair on one thread.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

struct LatentDims {
  int64_t b, n, h, hd;
  int64_t d() const { return h * hd; }
};

LatentDims check_latent(const char* op, const Tensor& q, const Tensor& kv, int64_t heads) {
  check_cpu_f32(op, "q", q);
  check_cpu_f32(op, "kv", kv);
  if (heads <= 0 || q.ndim() != 1 || q.size(0) % heads || kv.ndim() != 3 ||
      kv.size(2) != 2 * q.size(0) || q.size(0) == 0) {
    throw ShapeError(std::string(op) + ": expected q [H * hd] and kv [B, N, 2 * H * hd] with H = " +
                     std::to_string(heads) + ", found " + q.shape().str() + " and " +
                     kv.shape().str());
  }
  return {kv.size(0), kv.size(1), heads, q.size(0) / heads};
}

}  // namespace

void latent_attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& kv,
                              int64_t heads, float scale) {
  const char* op = "latent_attention_forward";
  const LatentDims d = check_latent(op, q, kv, heads);
  const OpScope scope(OpClass::attention, 4.0 * d.b * d.n * d.d());
  check_shape(op, "out", out, {d.b, d.d()});
  check_shape(op, "probs", probs, {d.b, d.h, d.n});
  const float* pq = q.f32();
  const float* pkv = kv.f32();
  float* po = out.f32();
  float* pp = probs.f32();
  const int64_t row = 2 * d.d();
#pragma omp parallel for schedule(static) if (d.b * d.h * d.n * d.hd > 32768)
  for (int64_t pair = 0; pair < d.b * d.h; ++pair) {
    const int64_t bi = pair / d.h, hi = pair % d.h;
    const float* qh = pq + hi * d.hd;
    const float* k = pkv + bi * d.n * row + hi * d.hd;
    const float* v = k + d.d();
    float* p = pp + pair * d.n;
    float mx = -INFINITY;
    for (int64_t j = 0; j < d.n; ++j) {
      float dot = 0;
      for (int64_t c = 0; c < d.hd; ++c) dot += qh[c] * k[j * row + c];
      p[j] = dot * scale;
      mx = std::max(mx, p[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < d.n; ++j) sum += p[j] = std::exp(p[j] - mx);
    const float inv = 1.0f / sum;
    // Probabilities under 2 x FLT_MIN become 0, not subnormals (cpu::softmax_cut).
    const float cut = cpu::softmax_cut(sum);
    float* o = po + bi * d.d() + hi * d.hd;
    for (int64_t c = 0; c < d.hd; ++c) o[c] = 0;
    for (int64_t j = 0; j < d.n; ++j) {
      p[j] = p[j] < cut ? 0.0f : p[j] * inv;
      for (int64_t c = 0; c < d.hd; ++c) o[c] += p[j] * v[j * row + c];
    }
  }
}

void latent_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& q,
                               const Tensor& kv, const Tensor& probs, int64_t heads, float scale) {
  const char* op = "latent_attention_backward";
  const LatentDims d = check_latent(op, q, kv, heads);
  const OpScope scope(OpClass::attention, 8.0 * d.b * d.n * d.d());
  check_shape(op, "dout", dout, {d.b, d.d()});
  check_shape(op, "probs", probs, {d.b, d.h, d.n});
  check_shape(op, "dkv", dkv, kv.shape());
  check_shape(op, "dq", dq, q.shape());
  const float* pq = q.f32();
  const float* pkv = kv.f32();
  const float* pdo = dout.f32();
  const float* pp = probs.f32();
  float* pdkv = dkv.f32();
  const int64_t row = 2 * d.d();
  // Each image's share of dq, summed over the images in order afterwards.
  std::vector<float> dq_of(static_cast<size_t>(d.b * d.d()));
#pragma omp parallel for schedule(static) if (d.b * d.h * d.n * d.hd > 32768)
  for (int64_t pair = 0; pair < d.b * d.h; ++pair) {
    const int64_t bi = pair / d.h, hi = pair % d.h;
    const float* qh = pq + hi * d.hd;
    const float* k = pkv + bi * d.n * row + hi * d.hd;
    const float* v = k + d.d();
    float* dk = pdkv + bi * d.n * row + hi * d.hd;
    float* dv = dk + d.d();
    const float* go = pdo + bi * d.d() + hi * d.hd;
    const float* p = pp + pair * d.n;
    // dp_j = dout . v_j; ds_j = p_j (dp_j - sum_i p_i dp_i); the logits are scale q . k_j.
    float dot = 0;
    std::vector<float> ds(static_cast<size_t>(d.n));
    for (int64_t j = 0; j < d.n; ++j) {
      float dp = 0;
      for (int64_t c = 0; c < d.hd; ++c) dp += go[c] * v[j * row + c];
      ds[j] = dp;
      dot += p[j] * dp;
    }
    float* dqh = dq_of.data() + bi * d.d() + hi * d.hd;
    for (int64_t c = 0; c < d.hd; ++c) dqh[c] = 0;
    for (int64_t j = 0; j < d.n; ++j) {
      const float g = p[j] * (ds[j] - dot) * scale;
      for (int64_t c = 0; c < d.hd; ++c) {
        dv[j * row + c] = p[j] * go[c];
        dk[j * row + c] = g * qh[c];
        dqh[c] += g * k[j * row + c];
      }
    }
  }
  float* g = dq.f32();
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t c = 0; c < d.d(); ++c) g[c] += dq_of[bi * d.d() + c];
  }
}

}  // namespace vitpe
