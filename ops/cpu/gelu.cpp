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

// Runs f(begin, end) over [0, n) in chunks across OpenMP's threads.
template <class F>
void parallel_chunks(int64_t n, F&& f) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace

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
