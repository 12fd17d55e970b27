// The AdamW update on the CPU (see ops/ops.h): one pass over w, g, m and v at SIMD width, with
// the vector square root (g++ leaves std::sqrt scalar while it may set errno).
#include "ops/cpu/vec_math.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

template <class V>
VITPE_INLINE void adamw_body(float* w, const float* g, float* m, float* v, int64_t n,
                             const AdamWStep& s) {
  constexpr int64_t lanes = cpu::kLanes<V>;
  int64_t k = 0;
  for (; k + lanes <= n; k += lanes) {
    V wk, gk, mk, vk;
    cpu::load(wk, w + k);
    cpu::load(gk, g + k);
    cpu::load(mk, m + k);
    cpu::load(vk, v + k);
    wk = wk * s.decay;
    mk = s.beta1 * mk + (1.0f - s.beta1) * gk;
    vk = s.beta2 * vk + (1.0f - s.beta2) * gk * gk;
    V den = vk;
    cpu::sqrt_inplace(den);
    den = den * s.inv_sqrt_bc2 + s.eps;
    wk = wk - s.step_size * mk / den;
    cpu::store(w + k, wk);
    cpu::store(m + k, mk);
    cpu::store(v + k, vk);
  }
  for (; k < n; ++k) {
    w[k] *= s.decay;
    m[k] = s.beta1 * m[k] + (1.0f - s.beta1) * g[k];
    v[k] = s.beta2 * v[k] + (1.0f - s.beta2) * g[k] * g[k];
    float den = v[k];
    cpu::sqrt_inplace(den);
    w[k] -= s.step_size * m[k] / (den * s.inv_sqrt_bc2 + s.eps);
  }
}
VITPE_AVX2 void adamw_avx2(float* w, const float* g, float* m, float* v, int64_t n,
                           const AdamWStep& s) {
  adamw_body<cpu::f32x8>(w, g, m, v, n, s);
}
void adamw_base(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  adamw_body<cpu::f32x4>(w, g, m, v, n, s);
}

}  // namespace

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  if (cpu::cpu_has_avx2_fma())
    adamw_avx2(w, g, m, v, n, s);
  else
    adamw_base(w, g, m, v, n, s);
}

}  // namespace vitpe
