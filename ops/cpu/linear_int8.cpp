// int8 linear layers with dynamic quantisation (the numbers are defined in ops/ops.h): weights
// quantised once per output channel, activations per row at run time, the product by oneDNN's
// u8 x s8 -> s32 matmul, then one pass that dequantises, adds the bias, applies GELU, the
// per-output scale and adds the residual.
//
// oneDNN 2.6 has neither per-row source scales nor per-row zero points for matmul, so the
// dequantisation is ours: acc - za[m] * sum[n] removes the zero point in exact integers (the
// column sums of the weights are made once), then one multiply by sa[m] sw[n]. Buffers come from
// the per-thread scratch slots and the primitive from the cache: a repeated call allocates
// nothing of ours.

#include "ops/cpu/linear_int8.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/linear_impl.h"
#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {
namespace cpu {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// The longest K whose s32 sums cannot overflow: |sum_k (a - za) q| <= 255 * 63 * K.
constexpr int64_t kMaxK = INT_MAX / (255 * kInt8WeightMax);

// Calls over fewer elements than this are not worth an OpenMP fork.
constexpr int64_t kParallelMin = 16384;

template <class V>
using IntV = typename IntOf<V>::type;

template <class V>
VITPE_INLINE void to_float(V& out, const IntV<V>& v) {
  if constexpr (std::is_same_v<V, float>) {
    out = static_cast<float>(v);
  } else {
    out = __builtin_convertvector(v, V);
  }
}
template <class V>
VITPE_INLINE void to_int(IntV<V>& out, const V& v) {
  if constexpr (std::is_same_v<V, float>) {
    out = static_cast<int32_t>(v);
  } else {
    out = __builtin_convertvector(v, IntV<V>);
  }
}
template <class V>
VITPE_INLINE void load_int(IntV<V>& v, const int32_t* p) {
  std::memcpy(&v, p, sizeof(v));
}

// ---- activations: per-row u8 --------------------------------------------------------------------

// lo = min(0, min x), hi = max(0, max x) over one row; `bad` becomes NaN when the row holds an
// infinity or a NaN (x - x is NaN exactly for those).
template <class V>
VITPE_INLINE void row_range_body(float& lo_out, float& hi_out, float& bad_out, const float* x,
                                 int64_t k) {
  constexpr int64_t w = kLanes<V>;
  V lo = V{}, hi = V{}, bad = V{};
  int64_t j = 0;
  for (; j + w <= k; j += w) {
    V v;
    load(v, x + j);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    bad = bad + (v - v);
  }
  float l = -hmax<V>(-lo), h = hmax<V>(hi), b = hsum<V>(bad);
  for (; j < k; ++j) {
    l = std::min(l, x[j]);
    h = std::max(h, x[j]);
    b += x[j] - x[j];
  }
  lo_out = l;
  hi_out = h;
  bad_out = b;
}

// Stores values already in [0, 255] as bytes (a float's one lane, or SSE4.1's four).
VITPE_INLINE void store_u8(uint8_t* p, const int32_t& q) { *p = static_cast<uint8_t>(q); }
VITPE_INLINE void store_u8(uint8_t* p, const i32x4& q) {
  const __m128i v = reinterpret_cast<__m128i>(q);
  const __m128i w = _mm_packus_epi32(v, v);
  const int32_t four = _mm_cvtsi128_si32(_mm_packus_epi16(w, w));
  std::memcpy(p, &four, sizeof(four));
}

// q = clamp(round(x / sa) + za, 0, 255) for the lanes of V at x. Adding and subtracting 1.5 * 2^23
// rounds a float below 2^22 in magnitude to the nearest integer, ties to even (|x / sa| <= 255
// here).
template <class V>
VITPE_INLINE void quantize_lanes(IntV<V>& q, const float* x, float sa, float za) {
  const float magic = 12582912.0f;
  V v;
  load(v, x);
  v = v / sa;
  v = (v + magic) - magic;
  v = v + za;
  v = v < 0.0f ? V{} : v;
  v = v > 255.0f ? V{} + 255.0f : v;
  to_int<V>(q, v);
}

// a = q over one row (quantize_lanes), in vectors of V from column j, then the tail.
template <class V>
VITPE_INLINE void quantize_row_from(uint8_t* a, const float* x, float sa, float za, int64_t j,
                                    int64_t k) {
  for (; j + kLanes<V> <= k; j += kLanes<V>) {
    IntV<V> q;
    quantize_lanes<V>(q, x + j, sa, za);
    store_u8(a + j, q);
  }
  for (; j < k; ++j) {
    int32_t q;
    quantize_lanes<float>(q, x + j, sa, za);
    store_u8(a + j, q);
  }
}

// The AVX2 row is a function of its own: its byte store needs AVX2 in the function that holds
// it, which a template instance cannot say.
VITPE_AVX2 void quantize_row_avx2(uint8_t* a, const float* x, float sa, float za, int64_t k) {
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) {
    i32x8 q;
    quantize_lanes<f32x8>(q, x + j, sa, za);
    const __m256i v = reinterpret_cast<__m256i>(q);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(a + j), _mm_packus_epi16(w, w));
  }
  quantize_row_from<float>(a, x, sa, za, j, k);
}

template <class V>
VITPE_INLINE void quantize_row_body(uint8_t* a, const float* x, float sa, float za, int64_t k) {
  if constexpr (std::is_same_v<V, f32x8>) {
    quantize_row_avx2(a, x, sa, za, k);
  } else {
    quantize_row_from<V>(a, x, sa, za, 0, k);
  }
}

template <class V>
VITPE_INLINE void quantize_one_row(uint8_t* a, float& sa, int32_t& za, const float* x, int64_t k) {
  float lo, hi, bad;
  row_range_body<V>(lo, hi, bad, x, k);
  if (std::isnan(bad) || !std::isfinite(hi - lo)) {
    // Like f32, a non-finite input (or a range beyond float's) gives a non-finite output row:
    // sa = NaN poisons it.
    sa = std::nanf("");
    za = 0;
    std::fill(a, a + k, uint8_t{0});
    return;
  }
  sa = hi > lo ? (hi - lo) / 255.0f : 1.0f;
  za = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / sa), 0.0f, 255.0f));
  quantize_row_body<V>(a, x, sa, static_cast<float>(za), k);
}

VITPE_AVX2 void quantize_rows_avx2(uint8_t* a, float* sa, int32_t* za, const float* x, int64_t m,
                                   int64_t k) {
#pragma omp parallel for schedule(static) if (m * k > kParallelMin)
  for (int64_t i = 0; i < m; ++i) quantize_one_row<f32x8>(a + i * k, sa[i], za[i], x + i * k, k);
}
void quantize_rows_base(uint8_t* a, float* sa, int32_t* za, const float* x, int64_t m, int64_t k) {
#pragma omp parallel for schedule(static) if (m * k > kParallelMin)
  for (int64_t i = 0; i < m; ++i) quantize_one_row<f32x4>(a + i * k, sa[i], za[i], x + i * k, k);
}

// ---- epilogue: dequantise, bias, GELU, scale, residual ------------------------------------------

struct Epilogue {
  const int32_t* acc;  // products of rows i0.. and columns [j0, j0 + acc_ld), rows acc_ld apart
  int64_t acc_ld, i0, j0;
  const float* sa;        // [M]
  const int32_t* za;      // [M]
  const float* sw;        // [N]
  const int32_t* sum;     // [N]
  const float* b;         // [N] or nullptr
  const float* residual;  // [M, N] or nullptr (may be y)
  float* y;               // [M, N]
  int64_t n;
  bool gelu;
  const float* gamma;  // [N] or nullptr: the per-output scale after the activation
};

// y[i, j..j+lanes) for a column j of the block; T is a vector or, for the block's tail, float.
template <class T>
VITPE_INLINE void epilogue_at(const Epilogue& e, int64_t i, int64_t j) {
  const int64_t at = i * e.n + j;
  IntV<T> c, s;
  load_int<T>(c, e.acc + (i - e.i0) * e.acc_ld + (j - e.j0));
  load_int<T>(s, e.sum + j);
  c = c - s * e.za[i];  // exact: |sum_k (a - za) q| fits in s32 (kMaxK)
  T v, scale;
  to_float<T>(v, c);
  load(scale, e.sw + j);
  v = v * (scale * e.sa[i]);
  if (e.b) {
    T bias;
    load(bias, e.b + j);
    v = v + bias;
  }
  if (e.gelu) {
    T cdf;
    normal_cdf_fast(cdf, v);
    v = v * cdf;
  }
  if (e.gamma) {
    T g;
    load(g, e.gamma + j);
    v = v * g;
  }
  if (e.residual) {
    T r;
    load(r, e.residual + at);
    v = v + r;
  }
  store(e.y + at, v);
}

// Row i of the block.
template <class V>
VITPE_INLINE void epilogue_row(const Epilogue& e, int64_t i) {
  const int64_t j1 = e.j0 + e.acc_ld;
  int64_t j = e.j0;
  for (; j + kLanes<V> <= j1; j += kLanes<V>) epilogue_at<V>(e, i, j);
  for (; j < j1; ++j) epilogue_at<float>(e, i, j);
}

// The tiles of the fused loop, each a product on one thread and its epilogue while the s32
// products are in that core's cache. Every tile's product packs its share of the inputs again:
// column tiles repack all M rows of a (M K per tile), row tiles repack the weights (N K per
// tile). Few rows (batch 1: M = 197) take all rows and 64 columns, many rows (batch 8: 1576)
// take kTileRows rows and all columns, which repacks half as much as 64-column tiles would.
constexpr int64_t kTileCols = 64, kTileRows = 128, kManyRows = 512;

struct Tiling {
  int64_t rows, cols;  // of a full tile
  int64_t row_tiles, col_tiles;
  Tiling(int64_t m, int64_t n)
      : rows(m > kManyRows ? kTileRows : m),
        cols(m > kManyRows ? n : std::min(n, kTileCols)),
        row_tiles((m + rows - 1) / rows),
        col_tiles((n + cols - 1) / cols) {}
  int64_t tiles() const { return row_tiles * col_tiles; }
};

// The arguments of one fused call.
struct FusedCall {
  float* y;
  const float* x;
  const Int8Weights* w;
  const float* b;
  const float* residual;
  int64_t m;
  bool gelu;
  const float* gamma;  // [N] or nullptr
  uint8_t* a;          // [M, K] quantised rows
  float* sa;           // [M]
  int32_t* za;
  Tiling tiling;
  bool parallel() const {
    return m * w->n > kParallelMin && omp_get_max_threads() > 1 && !omp_in_parallel();
  }
};

// The calling thread's products of the (at most four) tile shapes: full or last rows x full or
// last columns, and its scratch for a full tile's products. Every thread makes them all before
// taking tiles, so which tiles a thread happens to take never builds a primitive or grows a
// buffer after the first call.
struct TilePrimitives {
  CachedPrimitive* p[2][2] = {};
  explicit TilePrimitives(const FusedCall& c) {
    const Tiling& t = c.tiling;
    const int64_t last_rows = c.m - (t.row_tiles - 1) * t.rows;
    const int64_t last_cols = c.w->n - (t.col_tiles - 1) * t.cols;
    for (int r = 0; r < 2; ++r) {
      for (int q = 0; q < 2; ++q) {
        const int64_t mr = r ? last_rows : t.rows, nc = q ? last_cols : t.cols;
        if ((r && last_rows == t.rows) || (q && last_cols == t.cols)) continue;
        p[r][q] = &u8s8s32_primitive(mr, c.w->k, nc);
      }
    }
    scratch(ScratchSlot::linear_1, static_cast<size_t>(t.rows * t.cols) * sizeof(int32_t));
    // The thread's oneDNN stream is made at its first execution: make it here, so that a thread
    // that took no tile before (tiles go to whichever thread is free) allocates nothing when it
    // takes its first in a later call.
    dnnl_stream();
  }
  CachedPrimitive& of(int64_t rows, int64_t cols, const Tiling& t) const {
    CachedPrimitive* e = p[rows != t.rows][cols != t.cols];
    return *e;
  }
};

// Tile `tile`: its product on this thread alone, then its epilogue while the products are in
// cache.
template <class V>
VITPE_INLINE void fused_tile(const FusedCall& c, const TilePrimitives& p, int64_t tile) {
  const Tiling& t = c.tiling;
  const int64_t k = c.w->k, n = c.w->n;
  const int64_t i0 = tile / t.col_tiles * t.rows, mr = std::min(c.m, i0 + t.rows) - i0;
  const int64_t j0 = tile % t.col_tiles * t.cols, nc = std::min(n, j0 + t.cols) - j0;
  auto* acc = static_cast<int32_t*>(
      scratch(ScratchSlot::linear_1, static_cast<size_t>(mr * nc) * sizeof(int32_t)));
  p.of(mr, nc, t).run({c.a + i0 * k, c.w->q.data() + j0 * k, acc});
  const Epilogue e{acc, nc,         i0,  j0, c.sa,   c.za,   c.w->scale.data(), c.w->sum.data(),
                   c.b, c.residual, c.y, n,  c.gelu, c.gamma};
  for (int64_t i = i0; i < i0 + mr; ++i) epilogue_row<V>(e, i);
}

// x: [M, K] -> y: [M, N] (see linear_int8_forward) in one parallel region: the rows are
// quantised (split evenly), then each thread takes tiles as it finishes the last one
// (so a thread that shares its core with another process does fewer of them). oneDNN runs a
// primitive on the calling thread alone inside a parallel region; the cache keys its entries by
// the thread count set here and by the thread. A primitive that cannot be built (or run) stops
// the call with its error. (The region is written out in each ISA's function: an OpenMP region
// in a template keeps the template's, baseline, ISA.)
#define VITPE_INT8_FUSED_REGION(V)                                                           \
  RegionError error;                                                                         \
  _Pragma("omp parallel if (c.parallel())") {                                                \
    omp_set_num_threads(1);                                                                  \
    const int64_t k = c.w->k;                                                                \
    std::optional<TilePrimitives> p;                                                         \
    try {                                                                                    \
      p.emplace(c);                                                                          \
    } catch (...) {                                                                          \
      error.keep(std::current_exception());                                                  \
    }                                                                                        \
    _Pragma("omp for schedule(static)") for (int64_t i = 0; i < c.m; ++i) {                  \
      quantize_one_row<V>(c.a + i * k, c.sa[i], c.za[i], c.x + i * k, k);                    \
    }                                                                                        \
    _Pragma("omp for schedule(dynamic, 1)") for (int64_t t = 0; t < c.tiling.tiles(); ++t) { \
      if (!p || error.stopped()) continue;                                                   \
      try {                                                                                  \
        fused_tile<V>(c, *p, t);                                                             \
      } catch (...) {                                                                        \
        error.keep(std::current_exception());                                                \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  if (error.error) std::rethrow_exception(error.error);

VITPE_AVX2 void linear_int8_fused_avx2(const FusedCall& c) { VITPE_INT8_FUSED_REGION(f32x8) }
void linear_int8_fused_base(const FusedCall& c) { VITPE_INT8_FUSED_REGION(f32x4) }

// x: [M, K] -> y: [M, N] (see linear_int8_forward).
void linear_int8_rows_forward(float* y, const float* x, const Int8Weights& w, const float* b,
                              int64_t m, Act act, const float* residual, const float* gamma) {
  const int64_t k = w.k;
  auto* a = static_cast<uint8_t*>(scratch(ScratchSlot::linear_0, static_cast<size_t>(m * k)));
  auto* rows = static_cast<char*>(
      scratch(ScratchSlot::linear_2, static_cast<size_t>(m) * (sizeof(float) + sizeof(int32_t))));
  auto* sa = reinterpret_cast<float*>(rows);
  auto* za = reinterpret_cast<int32_t*>(rows + m * sizeof(float));
  const FusedCall c{y, x, &w, b, residual, m, act == Act::gelu, gamma, a, sa, za, Tiling(m, w.n)};
  if (cpu_has_avx2_fma()) {
    linear_int8_fused_avx2(c);
  } else {
    linear_int8_fused_base(c);
  }
}

}  // namespace

void quantize_rows_u8(uint8_t* a, float* scale, int32_t* zero, const float* x, int64_t m,
                      int64_t k) {
  if (cpu_has_avx2_fma()) {
    quantize_rows_avx2(a, scale, zero, x, m, k);
  } else {
    quantize_rows_base(a, scale, zero, x, m, k);
  }
}

CachedPrimitive& u8s8s32_primitive(int64_t m, int64_t k, int64_t n) {
  PrimitiveKey key(OpKind::linear_int8);
  key.add(m).add(k).add(n);
  return cached_primitive(key, [&](CachedPrimitive& e) {
    // a: [M, K] row-major; q: [N, K] read as its transpose [K, N] through strides.
    dnnl::memory::desc a_md({m, k}, dt::u8, dims{k, 1});
    dnnl::memory::desc q_md({k, n}, dt::s8, dims{1, k});
    dnnl::memory::desc acc_md({m, n}, dt::s32, dims{n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd;
    try {
      pd =
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, q_md, acc_md), attr, dnnl_engine());
    } catch (const dnnl::error& err) {
      throw std::runtime_error(
          "linear_int8_forward: oneDNN has no u8 x s8 -> s32 matmul for M=" + std::to_string(m) +
          ", K=" + std::to_string(k) + ", N=" + std::to_string(n) + " on this CPU (" +
          cpu_isa_name() + "): " + err.what());
    }
    e.init(dnnl::matmul(pd), pd.scratchpad_desc());
    e.bind(DNNL_ARG_SRC, a_md);
    e.bind(DNNL_ARG_WEIGHTS, q_md);
    e.bind(DNNL_ARG_DST, acc_md);
  });
}

void matmul_u8s8s32(int32_t* acc, const uint8_t* a, const int8_t* q, int64_t m, int64_t k,
                    int64_t n) {
  u8s8s32_primitive(m, k, n).run({a, q, acc});
}

}  // namespace cpu

Int8Weights quantize_weights_int8(const Tensor& w) {
  const char* op = "quantize_weights_int8";
  cpu::check_weight_matrix(op, w);
  const int64_t n = w.size(0), k = w.size(1);
  if (k > cpu::kMaxK) {
    throw ShapeError(std::string(op) + ": w " + w.shape().str() + " has K = " + std::to_string(k) +
                     ", above the " + std::to_string(cpu::kMaxK) +
                     " for which the s32 sums of u8 x s8 products cannot overflow");
  }
  Int8Weights out;
  out.n = n;
  out.k = k;
  out.q.resize(static_cast<size_t>(n * k));
  out.scale.resize(static_cast<size_t>(n));
  out.sum.resize(static_cast<size_t>(n));
  const float* src = w.f32();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = src + i * k;
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (!std::isfinite(row[j])) {
        throw std::invalid_argument(std::string(op) + ": w " + w.shape().str() + " holds " +
                                    std::to_string(row[j]) + " at [" + std::to_string(i) + ", " +
                                    std::to_string(j) + "]; expected finite weights");
      }
      amax = std::max(amax, std::abs(row[j]));
    }
    const float s = amax > 0.0f ? amax / static_cast<float>(kInt8WeightMax) : 1.0f;
    int32_t sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float q = std::clamp(std::nearbyint(row[j] / s), static_cast<float>(-kInt8WeightMax),
                                 static_cast<float>(kInt8WeightMax));
      out.q[i * k + j] = static_cast<int8_t>(q);
      sum += static_cast<int32_t>(q);
    }
    out.scale[i] = s;
    out.sum[i] = sum;
  }
  return out;
}

void linear_int8_forward(Tensor& y, const Tensor& x, const Int8Weights& w, const Tensor& b, Act act,
                         const Tensor& residual, const Tensor& scale) {
  const char* op = "linear_int8_forward";
  check_cpu_f32(op, "x", x);
  if (!w.defined()) {
    throw std::invalid_argument(std::string(op) +
                                ": w holds no weights; make them with quantize_weights_int8");
  }
  const int64_t k = w.k, n = w.n;
  if (static_cast<int64_t>(w.q.size()) != n * k || static_cast<int64_t>(w.scale.size()) != n ||
      static_cast<int64_t>(w.sum.size()) != n) {
    throw std::invalid_argument(std::string(op) + ": w says [" + std::to_string(n) + ", " +
                                std::to_string(k) + "] but holds " + std::to_string(w.q.size()) +
                                " values, " + std::to_string(w.scale.size()) + " scales and " +
                                std::to_string(w.sum.size()) +
                                " sums; make it with quantize_weights_int8");
  }
  if (x.ndim() < 1 || x.size(-1) != k) {
    throw ShapeError(std::string(op) + ": x " + x.shape().str() + " has last dimension " +
                     (x.ndim() ? std::to_string(x.size(-1)) : std::string("(none)")) + " but w [" +
                     std::to_string(n) + ", " + std::to_string(k) +
                     "] expects K = " + std::to_string(k));
  }
  const int64_t m = x.numel() / k;
  cpu::check_linear_outputs(op, x, y, b, residual, n, m, scale);
  if (m == 0) return;
  const OpScope scope(OpClass::linear, 2.0 * static_cast<double>(m) * k * n);
  if (act == Act::quick_gelu) {
    // Not in the integer epilogue: the product and bias, the activation over them, then the
    // residual (act before residual). CLIP's MLP, the only user, adds no residual here.
    if ((residual.defined() && residual.raw() == y.raw()) || scale.defined()) {
      throw std::invalid_argument(
          std::string(op) +
          ": quick_gelu with the residual in y itself, or with a scale, is not supported");
    }
    cpu::linear_int8_rows_forward(y.f32(), x.f32(), w, b.defined() ? b.f32() : nullptr, m,
                                  Act::none, nullptr, nullptr);
    quick_gelu_forward(y, y);
    if (residual.defined()) add_forward(y, y, residual);
    return;
  }
  cpu::linear_int8_rows_forward(y.f32(), x.f32(), w, b.defined() ? b.f32() : nullptr, m, act,
                                residual.defined() ? residual.f32() : nullptr,
                                scale.defined() ? scale.f32() : nullptr);
}

}  // namespace vitpe
