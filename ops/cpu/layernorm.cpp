// LayerNorm over the last dimension on the CPU, forward and backward.
//
// x: [..., D] is M = numel / D rows. Rows are independent, so both passes split rows over the
// OpenMP threads; a row (D = 96..1024 floats) stays in L1 between the statistics and the
// normalisation. The backward is one pass over the rows too: the parameter gradients, which sum
// over all rows, are summed per fixed block of kRowChunk rows (in double) while each row is in
// L1 for its dx, and the blocks' sums are then added in order, so the bits are the same
// whatever the thread count.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

// Rows per partial sum of the parameter gradients: fixed, so the order of the sums does not
// depend on the thread count.
constexpr int64_t kRowChunk = 64;

int64_t rows_of(const char* op, const Tensor& x, const Tensor& gamma) {
  if (x.ndim() < 1) throw ShapeError(std::string(op) + ": x has no dimensions");
  const int64_t d = x.size(-1);
  check_shape(op, "gamma", gamma, Shape{d});
  return d == 0 ? 0 : x.numel() / d;
}

// One row of the forward: y = (x - mean) rstd gamma + beta, its mean and rstd. Two passes over
// the row (it is in L1): the centred variance does not cancel the way E[x^2] - E[x]^2 does when
// |mean| >> std. The body is compiled three times, each vectorised for its ISA (the library's
// SSE4.2 baseline vectorises 4 floats at a time).
VITPE_INLINE void layernorm_row(float* yr, float& mean, float& rstd, const float* xr,
                                const float* pg, const float* pb, int64_t d, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) sum += xr[i];
  const float mu = sum / static_cast<float>(d);
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < d; ++i) sq += (xr[i] - mu) * (xr[i] - mu);
  const float rs = 1.0f / std::sqrt(sq / static_cast<float>(d) + eps);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mu) * rs * pg[i] + pb[i];
  mean = mu;
  rstd = rs;
}
using LayerNormRow = void (*)(float*, float&, float&, const float*, const float*, const float*,
                              int64_t, float);
void layernorm_row_base(float* yr, float& mean, float& rstd, const float* xr, const float* pg,
                        const float* pb, int64_t d, float eps) {
  layernorm_row(yr, mean, rstd, xr, pg, pb, d, eps);
}
VITPE_AVX2 void layernorm_row_avx2(float* yr, float& mean, float& rstd, const float* xr,
                                   const float* pg, const float* pb, int64_t d, float eps) {
  layernorm_row(yr, mean, rstd, xr, pg, pb, d, eps);
}
VITPE_AVX512 void layernorm_row_avx512(float* yr, float& mean, float& rstd, const float* xr,
                                       const float* pg, const float* pb, int64_t d, float eps) {
  layernorm_row(yr, mean, rstd, xr, pg, pb, d, eps);
}

}  // namespace

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& gamma,
                       const Tensor& beta, float eps) {
  const OpScope scope(OpClass::layernorm);
  const char* op = "layernorm_forward";
  check_cpu_f32(op, "x", x);
  check_cpu_f32(op, "gamma", gamma);
  check_cpu_f32(op, "beta", beta);
  const int64_t m = rows_of(op, x, gamma), d = x.size(-1);
  check_shape(op, "beta", beta, Shape{d});
  check_cpu_f32(op, "y", y);
  check_shape(op, "y", y, x.shape());
  float* pmean = nullptr;
  float* prstd = nullptr;
  if (mean.defined()) {
    check_cpu_f32(op, "mean", mean);
    check_shape(op, "mean", mean, Shape{m});
    pmean = mean.f32();
  }
  if (rstd.defined()) {
    check_cpu_f32(op, "rstd", rstd);
    check_shape(op, "rstd", rstd, Shape{m});
    prstd = rstd.f32();
  }
  const float* px = x.f32();
  const float* pg = gamma.f32();
  const float* pb = beta.f32();
  float* py = y.f32();

  const LayerNormRow row = cpu::cpu_has_avx512()     ? layernorm_row_avx512
                           : cpu::cpu_has_avx2_fma() ? layernorm_row_avx2
                                                     : layernorm_row_base;
#pragma omp parallel for schedule(static) if (m * d > 16384)
  for (int64_t r = 0; r < m; ++r) {
    float mu, rs;
    row(py + r * d, mu, rs, px + r * d, pg, pb, d, eps);
    if (pmean) pmean[r] = mu;
    if (prstd) prstd[r] = rs;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, xhat = (x - mean) rstd;
// dgamma = sum over rows of dy * xhat; dbeta = sum over rows of dy.
void layernorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& residual) {
  const OpScope scope(OpClass::layernorm);
  const char* op = "layernorm_backward";
  check_cpu_f32(op, "x", x);
  check_cpu_f32(op, "gamma", gamma);
  const int64_t m = rows_of(op, x, gamma), d = x.size(-1);
  check_cpu_f32(op, "dy", dy);
  check_shape(op, "dy", dy, x.shape());
  check_cpu_f32(op, "mean", mean);
  check_shape(op, "mean", mean, Shape{m});
  check_cpu_f32(op, "rstd", rstd);
  check_shape(op, "rstd", rstd, Shape{m});
  const float* px = x.f32();
  const float* pdy = dy.f32();
  const float* pg = gamma.f32();
  const float* pmean = mean.f32();
  const float* prstd = rstd.f32();

  float* pdx = nullptr;
  const float* pres = nullptr;
  float* pdg = nullptr;
  float* pdb = nullptr;
  if (dx.defined()) {
    check_cpu_f32(op, "dx", dx);
    check_shape(op, "dx", dx, x.shape());
    pdx = dx.f32();
    if (residual.defined()) {
      check_cpu_f32(op, "residual", residual);
      check_shape(op, "residual", residual, x.shape());
      pres = residual.f32();
    }
  }
  // Without a residual the gradient is added to dx itself.
  if (pdx && !pres) pres = pdx;
  if (dgamma.defined()) {
    check_cpu_f32(op, "dgamma", dgamma);
    check_shape(op, "dgamma", dgamma, Shape{d});
    pdg = dgamma.f32();
  }
  if (dbeta.defined()) {
    check_cpu_f32(op, "dbeta", dbeta);
    check_shape(op, "dbeta", dbeta, Shape{d});
    pdb = dbeta.f32();
  }
  const bool params = pdg || pdb;
  if ((!pdx && !params) || m == 0) return;
  // [chunks][2][d]: each block's sums of dy * xhat (dgamma) and of dy (dbeta), in double.
  const int64_t chunks = (m + kRowChunk - 1) / kRowChunk;
  double* part =
      params
          ? static_cast<double*>(cpu::scratch(cpu::ScratchSlot::layernorm_0,
                                              static_cast<size_t>(chunks * 2 * d) * sizeof(double)))
          : nullptr;
#pragma omp parallel for schedule(static) if (m * d > 16384)
  for (int64_t c = 0; c < chunks; ++c) {
    double* acc_g = params ? part + c * 2 * d : nullptr;
    double* acc_b = params ? acc_g + d : nullptr;
    if (params) std::fill(acc_g, acc_g + 2 * d, 0.0);
    for (int64_t r = c * kRowChunk; r < std::min(m, (c + 1) * kRowChunk); ++r) {
      const float* xr = px + r * d;
      const float* dyr = pdy + r * d;
      const float mu = pmean[r], rs = prstd[r];
      if (pdx) {
        float* dxr = pdx + r * d;
        const float* resr = pres + r * d;
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t i = 0; i < d; ++i) {
          const float g = dyr[i] * pg[i];
          sum_g += g;
          sum_gx += g * (xr[i] - mu) * rs;
        }
        const float mean_g = sum_g / static_cast<float>(d);
        const float mean_gx = sum_gx / static_cast<float>(d);
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) {
          const float xhat = (xr[i] - mu) * rs;
          dxr[i] = resr[i] + rs * (dyr[i] * pg[i] - mean_g - xhat * mean_gx);
        }
      }
      if (params) {
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) {
          acc_g[i] += static_cast<double>(dyr[i] * ((xr[i] - mu) * rs));
          acc_b[i] += static_cast<double>(dyr[i]);
        }
      }
    }
  }
  if (!params) return;
  // The blocks' sums in block order.
  for (int64_t i = 0; i < d; ++i) {
    double g = 0.0, b = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      g += part[c * 2 * d + i];
      b += part[c * 2 * d + d + i];
    }
    if (pdg) pdg[i] += static_cast<float>(g);
    if (pdb) pdb[i] += static_cast<float>(b);
  }
}

}  // namespace vitpe
