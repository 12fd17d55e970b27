// Elementwise ops on the CPU: exact (erf) GELU and its derivative, the residual add and the
// layer-scaled residual add.
//
// GELU(x) = x Phi(x) with Phi the standard normal CDF; d/dx = Phi(x) + x phi(x). Phi comes from
// a SIMD erfc (ops/cpu/vec_math.h) that shares its exponential with phi, so the loops run at
// SIMD width instead of calling std::erf per element, and the derivative costs no second exp. Work
// is split into contiguous chunks over the OpenMP threads.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/linear_impl.h"
#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

// g++ 12's AVX-512 intrinsics (vrcp14ps, vrndscaleps, ...) start from _mm512_undefined_ps(), a
// self-initialised variable that -Wmaybe-uninitialized reports where they are inlined (GCC bug
// 105593), as in ops/cpu/attention_tiles.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace vitpe {

namespace {

// Elements per parallel chunk: large enough to amortise the fork, small enough to balance.
constexpr int64_t kChunk = 16384;

template <class V>
VITPE_INLINE void gelu_fwd_body(float* y, const float* x, int64_t n) {
  constexpr int64_t w = cpu::kLanes<V>;
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    V v, c;
    cpu::load(v, x + i);
    cpu::normal_cdf(c, v);
    c = c * v;
    cpu::store(y + i, c);
  }
  for (; i < n; ++i) {
    float c;
    cpu::normal_cdf(c, x[i]);
    y[i] = x[i] * c;
  }
}
// dx += dy * (Phi(x) + x phi(x))
template <class V>
VITPE_INLINE void gelu_bwd_body(float* dx, const float* dy, const float* x, int64_t n) {
  constexpr int64_t w = cpu::kLanes<V>;
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    V v, g, c, p, acc;
    cpu::load(v, x + i);
    cpu::load(g, dy + i);
    cpu::load(acc, dx + i);
    cpu::normal_cdf_pdf(c, p, v);
    acc = acc + g * (c + v * p);
    cpu::store(dx + i, acc);
  }
  for (; i < n; ++i) {
    float c, p;
    cpu::normal_cdf_pdf(c, p, x[i]);
    dx[i] += dy[i] * (c + x[i] * p);
  }
}
// y = x Phi(x) and d = Phi(x) + x phi(x) in one pass (d may alias x).
template <class V>
VITPE_INLINE void gelu_fwd_deriv_body(float* y, float* d, const float* x, int64_t n) {
  constexpr int64_t w = cpu::kLanes<V>;
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    V v, c, p;
    cpu::load(v, x + i);
    cpu::normal_cdf_pdf(c, p, v);
    p = c + v * p;
    c = c * v;
    cpu::store(y + i, c);
    cpu::store(d + i, p);
  }
  for (; i < n; ++i) {
    float c, p;
    const float v = x[i];
    cpu::normal_cdf_pdf(c, p, v);
    y[i] = v * c;
    d[i] = c + v * p;
  }
}
// dx = dy * d
template <class V>
VITPE_INLINE void mul_body(float* dx, const float* dy, const float* d, int64_t n) {
  constexpr int64_t w = cpu::kLanes<V>;
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    V a, b;
    cpu::load(a, dy + i);
    cpu::load(b, d + i);
    a = a * b;
    cpu::store(dx + i, a);
  }
  for (; i < n; ++i) dx[i] = dy[i] * d[i];
}
VITPE_AVX2 void gelu_fwd_deriv_avx2(float* y, float* d, const float* x, int64_t n) {
  gelu_fwd_deriv_body<cpu::f32x8>(y, d, x, n);
}
void gelu_fwd_deriv_base(float* y, float* d, const float* x, int64_t n) {
  gelu_fwd_deriv_body<cpu::f32x4>(y, d, x, n);
}
VITPE_AVX2 void mul_avx2(float* dx, const float* dy, const float* d, int64_t n) {
  mul_body<cpu::f32x8>(dx, dy, d, n);
}
void mul_base(float* dx, const float* dy, const float* d, int64_t n) {
  mul_body<cpu::f32x4>(dx, dy, d, n);
}
VITPE_AVX2 void gelu_fwd_avx2(float* y, const float* x, int64_t n) {
  gelu_fwd_body<cpu::f32x8>(y, x, n);
}
void gelu_fwd_base(float* y, const float* x, int64_t n) { gelu_fwd_body<cpu::f32x4>(y, x, n); }
VITPE_AVX2 void gelu_bwd_avx2(float* dx, const float* dy, const float* x, int64_t n) {
  gelu_bwd_body<cpu::f32x8>(dx, dy, x, n);
}
void gelu_bwd_base(float* dx, const float* dy, const float* x, int64_t n) {
  gelu_bwd_body<cpu::f32x4>(dx, dy, x, n);
}

// GELU on AVX-512 from a table: Phi(a) for a = -|x| in [-7, 0] by 32 degree-5 polynomials, one
// per interval of 7/32, in the offset from the interval's centre; each lane's coefficients come
// from the table's 32-entry columns by vpermt2ps. Phi(x) = 1 - Phi(a) for x >= 0; below -7 Phi
// is 0 (GELU(-7) = -9e-12). scripts/fit_gelu_table.py makes the table and measures it: relative
// error of GELU 7.6e-7 on [-5, 5], 6.5e-6 on [-7, 7]; absolute 3.8e-7 (the float rounding of
// x Phi(x) at large |x|). About 0.35 ns per value on one Xeon core, against 0.58 for
// cpu::normal_cdf's erfc polynomial and exponential at 16 lanes and 1.1 for its AVX2 body.
alignas(64) constexpr float kGeluTable[6][32] = {
    {2.777403307e-12f, 1.262783367e-11f, 5.478363943e-11f, 2.267932925e-10f, 8.959717412e-10f,
     3.378106239e-09f, 1.215626266e-08f, 4.175521795e-08f, 1.369131439e-07f, 4.285950581e-07f,
     1.281047844e-06f, 3.656399031e-06f, 9.967170627e-06f, 2.595297337e-05f, 6.456159463e-05f,
     1.534678304e-04f, 3.486672358e-04f, 7.572909235e-04f, 1.572872745e-03f, 3.124940908e-03f,
     5.941076670e-03f, 1.081295032e-02f, 1.884892397e-02f, 3.148700297e-02f, 5.043764040e-02f,
     7.753127068e-02f, 1.144639775e-01f, 1.624655873e-01f, 2.219497263e-01f, 2.922323048e-01f,
     3.714085817e-01f, 4.564525187e-01f},
    {1.952508814e-11f, 8.606505092e-11f, 3.616418276e-10f, 1.448600240e-09f, 5.531418878e-09f,
     2.013458200e-08f, 6.986616086e-08f, 2.311049627e-07f, 7.287354151e-07f, 2.190527539e-06f,
     6.276908607e-06f, 1.714593236e-05f, 4.464724771e-05f, 1.108272554e-04f, 2.622507454e-04f,
     5.915687070e-04f, 1.272072783e-03f, 2.607576316e-03f, 5.095425062e-03f, 9.491658770e-03f,
     1.685474440e-02f, 2.853123285e-02f, 4.604020342e-02f, 7.082266361e-02f, 1.038545668e-01f,
     1.451768279e-01f, 1.934582740e-01f, 2.457512021e-01f, 2.975927591e-01f, 3.435321152e-01f,
     3.780338466e-01f, 3.965631425e-01f},
    {6.724747842e-11f, 2.870235161e-10f, 1.166563179e-09f, 4.514568719e-09f, 1.663435256e-08f,
     5.834956340e-08f, 1.948351240e-07f, 6.192206570e-07f, 1.872908342e-06f, 5.390357728e-06f,
     1.475968747e-05f, 3.844266757e-05f, 9.522097389e-05f, 2.242464398e-04f, 5.019555683e-04f,
     1.067584381e-03f, 2.156546107e-03f, 4.135439172e-03f, 7.523707580e-03f, 1.297688857e-02f,
     2.120014653e-02f, 3.276640922e-02f, 4.783874750e-02f, 6.584305316e-02f, 8.519329131e-02f,
     1.032116786e-01f, 1.163771749e-01f, 1.209555045e-01f, 1.139219850e-01f, 9.393431246e-02f,
     6.202098727e-02f, 2.168697491e-02f},
    {1.514178505e-10f,  6.247496409e-10f, 2.451653769e-09f,  9.148758195e-09f,  3.245876457e-08f,
     1.094650202e-07f,  3.508222619e-07f, 1.068188681e-06f,  3.089027132e-06f,  8.481092664e-06f,
     2.209821105e-05f,  5.461676119e-05f, 1.279702847e-04f,  2.840597008e-04f,  5.968559417e-04f,
     1.185908215e-03f,  2.225412056e-03f, 3.937844653e-03f,  6.556958426e-03f,  1.024593413e-02f,
     1.496797148e-02f,  2.033135481e-02f, 2.546461858e-02f,  2.900484577e-02f,  2.928067558e-02f,
     2.472171746e-02f,  1.442906447e-02f, -1.269799075e-03f, -2.052459493e-02f, -4.013150185e-02f,
     -5.622172728e-02f, -6.530292332e-02f},
    {2.551747702e-10f,  1.014767048e-09f,  3.832820283e-09f,  1.374564640e-08f,  4.679084142e-08f,
     1.511261729e-07f,  4.629261241e-07f,  1.344180873e-06f,  3.697622788e-06f,  9.629565284e-06f,
     2.372214840e-05f,  5.522517313e-05f,  1.213483920e-04f,  2.513031941e-04f,  4.895652528e-04f,
     8.949748590e-04f,  1.530319802e-03f,  2.436468843e-03f,  3.588306252e-03f,  4.838748369e-03f,
     5.871492438e-03f,  6.197573617e-03f,  5.234085955e-03f,  2.484178403e-03f,  -2.208806807e-03f,
     -8.419807069e-03f, -1.504102163e-02f, -2.043421753e-02f, -2.286192775e-02f, -2.108604275e-02f,
     -1.490587089e-02f, -5.384122021e-03f},
    {3.139111471e-10f,  1.206274192e-09f,  4.394956399e-09f,  1.517502568e-08f,  4.962924294e-08f,
     1.536419063e-07f,  4.499173372e-07f,  1.245193289e-06f,  3.253723889e-06f,  8.017384971e-06f,
     1.860100565e-05f,  4.055874524e-05f,  8.291289123e-05f,  1.584079582e-04f,  2.816276974e-04f,
     4.630695330e-04f,  6.976670120e-04f,  9.484999464e-04f,  1.130999532e-03f,  1.108727534e-03f,
     7.152530015e-04f,  -1.876254391e-04f, -1.620789291e-03f, -3.398139263e-03f, -5.088504404e-03f,
     -6.081652362e-03f, -5.775860511e-03f, -3.840862541e-03f, -4.451630812e-04f, 3.680514405e-03f,
     7.419201080e-03f,  9.645520709e-03f},
};
VITPE_AVX512 VITPE_INLINE __m512 gelu_avx512(__m512 x) {
  constexpr float kLow = -7.0f, kWidth = 7.0f / 32;
  const __m512 a = _mm512_or_ps(x, _mm512_set1_ps(-0.0f));  // -|x|
  const __m512 ac = _mm512_max_ps(a, _mm512_set1_ps(kLow));
  const __m512i at = _mm512_cvttps_epi32(
      _mm512_fmadd_ps(ac, _mm512_set1_ps(1.0f / kWidth), _mm512_set1_ps(-kLow / kWidth)));
  const __m512 centre = _mm512_fmadd_ps(_mm512_cvtepi32_ps(at), _mm512_set1_ps(kWidth),
                                        _mm512_set1_ps(kLow + 0.5f * kWidth));
  const __m512 u = _mm512_sub_ps(ac, centre);
  const auto coefficient = [&](int d) VITPE_AVX512_LAMBDA {
    return _mm512_permutex2var_ps(_mm512_load_ps(kGeluTable[d]), at,
                                  _mm512_load_ps(kGeluTable[d] + 16));
  };
  __m512 p = coefficient(5);
  for (int d = 4; d >= 0; --d) p = _mm512_fmadd_ps(p, u, coefficient(d));
  // Phi(a) = 0 below the table (and NaN stays NaN: the comparison is false only for a < kLow).
  p = _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(a, _mm512_set1_ps(kLow), _CMP_LT_OQ),
                         _mm512_setzero_ps());
  const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mul_ps(x, _mm512_mask_sub_ps(p, positive, _mm512_set1_ps(1.0f), p));
}
VITPE_AVX512 void gelu_fwd_avx512(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu_avx512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const auto k = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, k, gelu_avx512(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

// Runs f(begin, end) over [0, n) in chunks across OpenMP's threads.
template <class F>
void parallel_chunks(int64_t n, F&& f) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace

void cpu::gelu_rows(float* y, const float* x, int64_t count) {
  const auto gelu = cpu::cpu_has_avx512()     ? gelu_fwd_avx512
                    : cpu::cpu_has_avx2_fma() ? gelu_fwd_avx2
                                              : gelu_fwd_base;
  parallel_chunks(count, [&](int64_t b, int64_t e) { gelu(y + b, x + b, e - b); });
}

void cpu::gelu_with_derivative_rows(float* y, float* d, const float* x, int64_t count) {
  if (cpu::cpu_has_avx2_fma())
    gelu_fwd_deriv_avx2(y, d, x, count);
  else
    gelu_fwd_deriv_base(y, d, x, count);
}

void cpu::gelu_backward_run(float* dx, const float* dy, const float* d, int64_t rows, int64_t n,
                            float* sums) {
  if (cpu::cpu_has_avx2_fma()) {
    mul_avx2(dx, dy, d, rows * n);
    cpu::column_sums_of_rows_avx2(sums, dx, n, rows, n);
  } else {
    mul_base(dx, dy, d, rows * n);
    cpu::column_sums_of_rows_base(sums, dx, n, rows, n);
  }
}

void gelu_forward(Tensor& y, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  check_cpu_f32("gelu_forward", "x", x);
  check_same("gelu_forward", "y", y, "x", x);
  const float* px = x.f32();
  float* py = y.f32();
  const bool avx2 = cpu::cpu_has_avx2_fma();
  parallel_chunks(x.numel(), [&](int64_t b, int64_t e) {
    if (avx2)
      gelu_fwd_avx2(py + b, px + b, e - b);
    else
      gelu_fwd_base(py + b, px + b, e - b);
  });
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  check_cpu_f32("gelu_backward", "x", x);
  check_same("gelu_backward", "dy", dy, "x", x);
  if (!dx.defined()) return;
  check_same("gelu_backward", "dx", dx, "x", x);
  const float* px = x.f32();
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
  const bool avx2 = cpu::cpu_has_avx2_fma();
  parallel_chunks(x.numel(), [&](int64_t b, int64_t e) {
    if (avx2)
      gelu_bwd_avx2(pdx + b, pdy + b, px + b, e - b);
    else
      gelu_bwd_base(pdx + b, pdy + b, px + b, e - b);
  });
}

void gelu_forward_with_derivative(Tensor& y, Tensor& dydx, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  const char* op = "gelu_forward_with_derivative";
  check_cpu_f32(op, "x", x);
  check_same(op, "y", y, "x", x);
  check_same(op, "dydx", dydx, "x", x);
  if (x.numel() > 0 && (y.raw() == dydx.raw() || y.raw() == x.raw())) {
    throw std::invalid_argument(std::string(op) +
                                ": y must be neither dydx nor x (dydx may be x itself)");
  }
  const float* px = x.f32();
  float* py = y.f32();
  float* pd = dydx.f32();
  const bool avx2 = cpu::cpu_has_avx2_fma();
  parallel_chunks(x.numel(), [&](int64_t b, int64_t e) {
    if (avx2)
      gelu_fwd_deriv_avx2(py + b, pd + b, px + b, e - b);
    else
      gelu_fwd_deriv_base(py + b, pd + b, px + b, e - b);
  });
}

void gelu_backward_with_derivative(Tensor& dx, const Tensor& dy, const Tensor& dydx) {
  const OpScope scope(OpClass::gelu);
  const char* op = "gelu_backward_with_derivative";
  check_cpu_f32(op, "dydx", dydx);
  check_same(op, "dy", dy, "dydx", dydx);
  check_same(op, "dx", dx, "dydx", dydx);
  const float* pdy = dy.f32();
  const float* pd = dydx.f32();
  float* pdx = dx.f32();
  const bool avx2 = cpu::cpu_has_avx2_fma();
  parallel_chunks(dy.numel(), [&](int64_t b, int64_t e) {
    if (avx2)
      mul_avx2(pdx + b, pdy + b, pd + b, e - b);
    else
      mul_base(pdx + b, pdy + b, pd + b, e - b);
  });
}

void gelu_backward_with_derivative(Tensor& dx, const Tensor& dy, const Tensor& dydx,
                                   Tensor& column_sums) {
  const OpScope scope(OpClass::gelu);
  const char* op = "gelu_backward_with_derivative";
  check_cpu_f32(op, "dydx", dydx);
  check_same(op, "dy", dy, "dydx", dydx);
  check_same(op, "dx", dx, "dydx", dydx);
  if (dydx.ndim() < 1) throw ShapeError(std::string(op) + ": dydx has no dimensions");
  const int64_t n = dydx.size(-1), m = n == 0 ? 0 : dydx.numel() / n;
  check_cpu_f32(op, "column_sums", column_sums);
  check_shape(op, "column_sums", column_sums, Shape{n});
  if (m == 0) return;
  const float* pdy = dy.f32();
  const float* pd = dydx.f32();
  float* pdx = dx.f32();
  float* sums = column_sums.f32();
  // Runs of rows: each is multiplied, then summed while it is in cache; the runs' sums are added
  // per column in run order, in double (as linear_backward's bias gradient).
  const int64_t rows = cpu::kColumnSumRows, runs = (m + rows - 1) / rows;
  float* part = cpu::scratch_f32(cpu::ScratchSlot::elementwise_0, static_cast<size_t>(runs * n));
#pragma omp parallel if (m * n > kChunk)
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t b = r * rows * n, count = std::min(m, (r + 1) * rows) - r * rows;
      cpu::gelu_backward_run(pdx + b, pdy + b, pd + b, count, n, part + r * n);
    }
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) sums[j] += cpu::run_total(part, runs, n, j);
  }
}

void add_forward(Tensor& y, const Tensor& a, const Tensor& b) {
  const OpScope scope(OpClass::elementwise);
  check_cpu_f32("add_forward", "a", a);
  check_same("add_forward", "b", b, "a", a);
  check_same("add_forward", "y", y, "a", a);
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  parallel_chunks(a.numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) py[i] = pa[i] + pb[i];
  });
}

void add_backward(Tensor& da, Tensor& db, const Tensor& dy) {
  const OpScope scope(OpClass::elementwise);
  check_cpu_f32("add_backward", "dy", dy);
  const float* pdy = dy.f32();
  for (Tensor* d : {&da, &db}) {
    if (!d->defined()) continue;
    check_same("add_backward", d == &da ? "da" : "db", *d, "dy", dy);
    float* pd = d->f32();
    parallel_chunks(dy.numel(), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) pd[i] += pdy[i];
    });
  }
}

namespace {

// x [..., 2H] and its gated output [..., H]: the rows and H.
int64_t check_swiglu(const char* op, const Tensor& x, const Tensor& y, const char* y_what) {
  check_cpu_f32(op, "x", x);
  check_cpu_f32(op, y_what, y);
  const int64_t two_h = x.ndim() ? x.size(-1) : 0;
  if (two_h == 0 || two_h % 2 || y.shape() != x.shape().with_last(two_h / 2)) {
    throw ShapeError(std::string(op) + ": expected x [..., 2H] and " + y_what +
                     " [..., H], found " + x.shape().str() + " and " + y.shape().str());
  }
  return two_h / 2;
}

}  // namespace

void swiglu_forward(Tensor& y, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  const int64_t H = check_swiglu("swiglu_forward", x, y, "y"), rows = y.numel() / H;
  const float* px = x.f32();
  float* py = y.f32();
#pragma omp parallel for schedule(static) if (rows * H > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = px + r * 2 * H;
    const float* v = g + H;
    for (int64_t j = 0; j < H; ++j) py[r * H + j] = g[j] / (1.0f + std::exp(-g[j])) * v[j];
  }
}

void swiglu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  const int64_t H = check_swiglu("swiglu_backward", x, dy, "dy"), rows = dy.numel() / H;
  check_same("swiglu_backward", "dx", dx, "x", x);
  const float* px = x.f32();
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
#pragma omp parallel for schedule(static) if (rows * H > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = px + r * 2 * H;
    const float* v = g + H;
    float* dg = pdx + r * 2 * H;
    float* dv = dg + H;
    for (int64_t j = 0; j < H; ++j) {
      const float s = 1.0f / (1.0f + std::exp(-g[j]));  // sigmoid; silu' = s (1 + g (1 - s))
      dg[j] = pdy[r * H + j] * v[j] * s * (1.0f + g[j] * (1.0f - s));
      dv[j] = pdy[r * H + j] * g[j] * s;
    }
  }
}

void quick_gelu_forward(Tensor& y, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  check_cpu_f32("quick_gelu_forward", "x", x);
  check_same("quick_gelu_forward", "y", y, "x", x);
  const float* px = x.f32();
  float* py = y.f32();
  parallel_chunks(x.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] = px[i] / (1.0f + std::exp(-kQuickGeluAlpha * px[i]));
  });
}

void quick_gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const OpScope scope(OpClass::gelu);
  check_cpu_f32("quick_gelu_backward", "x", x);
  check_same("quick_gelu_backward", "dy", dy, "x", x);
  check_same("quick_gelu_backward", "dx", dx, "x", x);
  const float* px = x.f32();
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
  parallel_chunks(x.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-kQuickGeluAlpha * px[i]));
      pdx[i] = pdy[i] * (s + kQuickGeluAlpha * px[i] * s * (1.0f - s));
    }
  });
}

namespace {

// gamma [D] against x [..., D]: the rows and D.
int64_t check_layer_scale(const char* op, const Tensor& x, const Tensor& gamma) {
  check_cpu_f32(op, "gamma", gamma);
  const int64_t D = x.shape().size() ? x.size(-1) : 0;
  if (gamma.shape().size() != 1 || gamma.size(0) != D || D == 0) {
    throw ShapeError(std::string(op) + ": expected gamma of shape [" + std::to_string(D) +
                     "] (the last dimension of " + x.shape().str() + "), found " +
                     gamma.shape().str());
  }
  return x.numel() / D;
}

// Runs f(r) for every row r of `rows` rows of D floats, in chunks of about kChunk floats.
template <class F>
void parallel_rows(int64_t rows, int64_t D, F&& f) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunk / D);
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(rows, (c + 1) * rows_per_chunk);
    for (int64_t r = c * rows_per_chunk; r < end; ++r) f(r);
  }
}

}  // namespace

void layer_scale_add_forward(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& a) {
  const OpScope scope(OpClass::elementwise);
  const char* op = "layer_scale_add_forward";
  check_cpu_f32(op, "x", x);
  check_same(op, "a", a, "x", x);
  check_same(op, "y", y, "x", x);
  const int64_t rows = check_layer_scale(op, x, gamma), D = gamma.size(0);
  const float* px = x.f32();
  const float* pa = a.f32();
  const float* pg = gamma.f32();
  float* py = y.f32();
  parallel_rows(rows, D, [&](int64_t r) {
    const float* xr = px + r * D;
    const float* ar = pa + r * D;
    float* yr = py + r * D;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) yr[d] = xr[d] + pg[d] * ar[d];
  });
}

void layer_scale_add_backward(Tensor& da, Tensor& dgamma, const Tensor& dy, const Tensor& gamma,
                              const Tensor& a) {
  const OpScope scope(OpClass::elementwise);
  const char* op = "layer_scale_add_backward";
  check_cpu_f32(op, "dy", dy);
  check_same(op, "a", a, "dy", dy);
  const int64_t rows = check_layer_scale(op, dy, gamma), D = gamma.size(0);
  check_same(op, "dgamma", dgamma, "gamma", gamma);
  const float* pdy = dy.f32();
  const float* pa = a.f32();
  const float* pg = gamma.f32();
  if (da.defined()) {
    check_same(op, "da", da, "dy", dy);
    float* pda = da.f32();
    parallel_rows(rows, D, [&](int64_t r) {
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) pda[r * D + d] = pdy[r * D + d] * pg[d];
    });
  }
  // Channel blocks in parallel, each summing every row in order: the same result for any
  // thread count, and contiguous loads within a block.
  constexpr int64_t kBlock = 64;
  float* pdg = dgamma.f32();
  const int64_t blocks = (D + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && rows * D > kChunk)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t d0 = blk * kBlock, d1 = std::min(D, d0 + kBlock);
    float acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = pdy + r * D;
      const float* ar = pa + r * D;
#pragma omp simd
      for (int64_t d = d0; d < d1; ++d) acc[d - d0] += dyr[d] * ar[d];
    }
    for (int64_t d = d0; d < d1; ++d) pdg[d] += acc[d - d0];
  }
}

}  // namespace vitpe
