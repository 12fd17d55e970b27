// SIMD math for the CPU ops (softmax, GELU, cross entropy, attention) and the AVX2 dispatch they
// share.
//
// std::exp / std::erf are scalar library calls, and g++ does not auto-vectorise a hand-written
// polynomial exp either (its clamps become branches under the default -ftrapping-math). So the
// kernels use GCC vector extensions: the same template body runs on f32x4 (SSE, the library's
// x86-64-v2 baseline), f32x8 (AVX2 + FMA, in a function marked VITPE_AVX2) or f32x16 (AVX-512,
// in a function marked VITPE_AVX512: attention's softmax rows, where an Intel core's two 512-bit
// FMA ports halve the instructions; LayerNorm's rows are compiled for it as well), and on plain
// float for row tails. Callers pick the variant once per process with cpu_has_avx512() and
// cpu_has_avx2_fma().
//
// Vectors are passed by reference only: a 32-byte vector passed by value in code compiled
// without AVX changes the psABI, which g++ reports (-Wpsabi) even for inlined functions.
#pragma once

#include <immintrin.h>

#include <atomic>
#include <bit>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#define VITPE_AVX2 __attribute__((target("avx2,fma")))
#define VITPE_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define VITPE_INLINE inline __attribute__((always_inline))
// A lambda inside a VITPE_AVX512 function: compiled for AVX-512 too (for its intrinsics), inlined.
#define VITPE_AVX512_LAMBDA \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"), always_inline))

namespace vitpe::cpu {

typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

// Tests switch the AVX2 kernels off to exercise the baseline (SSE) kernels on AVX2 machines.
inline std::atomic<bool>& avx2_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

// The widest of vitpe's own kernels that oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA, or the older
// DNNL_MAX_CPU_ISA) allows, read once: 512 (no cap, or an AVX-512 or AMX cap), 256 (AVX2 caps)
// or 128 (SSE41 or AVX), so that measuring an AVX2 host on an AVX-512 one caps both libraries.
inline int own_isa_cap_bits() {
  static const int bits = [] {
    const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (cap == nullptr || *cap == '\0') cap = std::getenv("DNNL_MAX_CPU_ISA");
    if (cap == nullptr || *cap == '\0') return 512;
    std::string s(cap);
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (s == "SSE41" || s == "AVX") return 128;
    if (s.rfind("AVX2", 0) == 0) return 256;
    return 512;
  }();
  return bits;
}

// True when the CPU runs AVX2 and FMA (checked once) and the AVX2 kernels are allowed.
inline bool cpu_has_avx2_fma() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && own_isa_cap_bits() >= 256;
  return has && avx2_allowed().load(std::memory_order_relaxed);
}

// Tests switch the AVX-512 kernels off to exercise the AVX2 ones on AVX-512 machines.
inline std::atomic<bool>& avx512_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

// True when the CPU runs AVX-512 F, DQ, BW and VL (checked once) and both the AVX-512 and the
// AVX2 kernels are allowed (switching AVX2 off selects the baseline everywhere).
inline bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma") && own_isa_cap_bits() >= 512;
  return has && avx512_allowed().load(std::memory_order_relaxed) && cpu_has_avx2_fma();
}

template <class V>
struct IntOf;
template <>
struct IntOf<float> {
  using type = int32_t;
};
template <>
struct IntOf<f32x4> {
  using type = i32x4;
};
template <>
struct IntOf<f32x8> {
  using type = i32x8;
};
template <>
struct IntOf<f32x16> {
  using type = i32x16;
};

template <class V>
constexpr int64_t kLanes = sizeof(V) / sizeof(float);

// Bit reinterpretation for scalars and vectors.
VITPE_INLINE void reinterpret(int32_t& out, const float& v) { out = std::bit_cast<int32_t>(v); }
VITPE_INLINE void reinterpret(float& out, const int32_t& v) { out = std::bit_cast<float>(v); }
template <class A, class B>
VITPE_INLINE void reinterpret(A& out, const B& v) {
  out = (A)v;  // NOLINT: a C cast between GCC vectors of one size reinterprets the bits
}

template <class V>
VITPE_INLINE void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <class V>
VITPE_INLINE void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
// x <- sqrt(x), correctly rounded, for each instance (the vector sqrt instructions; g++ does
// not vectorise std::sqrt while it may set errno). The AVX2 one is not always_inline: a template
// body (not itself AVX2) may call it, and g++ inlines it once that body is inside an AVX2
// function.
VITPE_INLINE void sqrt_inplace(float& x) { x = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x))); }
VITPE_INLINE void sqrt_inplace(f32x4& x) { x = (f32x4)_mm_sqrt_ps((__m128)x); }
VITPE_AVX2 inline void sqrt_inplace(f32x8& x) { x = (f32x8)_mm256_sqrt_ps((__m256)x); }

template <class V>
VITPE_INLINE float hsum(const V& v) {
  if constexpr (std::is_same_v<V, float>) {
    return v;
  } else {
    float s = 0.0f;
    for (int i = 0; i < kLanes<V>; ++i) s += v[i];
    return s;
  }
}
template <class V>
VITPE_INLINE float hmax(const V& v) {
  if constexpr (std::is_same_v<V, float>) {
    return v;
  } else {
    float m = v[0];
    for (int i = 1; i < kLanes<V>; ++i) m = v[i] > m ? v[i] : m;
    return m;
  }
}

// x <- exp(x), relative error below 1e-7 for x in [-87, 88]; outside, x is clamped (results
// ~1e-38 and ~1.6e38, which is what softmax and GELU need). Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2 / 2, then a degree-7 polynomial in r and 2^n from the exponent bits.
template <class V>
VITPE_INLINE void exp_inplace(V& x) {
  using I = typename IntOf<V>::type;
  const V lo = V{} - 87.0f, hi = V{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Adding 1.5 * 2^23 rounds to the nearest integer in the low mantissa bits.
  const V magic = V{} + 12582912.0f;
  const V t = x * 1.44269504088896341f + magic;
  I tb, mb;
  reinterpret(tb, t);
  reinterpret(mb, magic);
  const I n = tb - mb;
  const V nf = t - magic;
  V r = x - nf * 0.693145751953125f;       // ln2 split in a high part exact in float ...
  r = r - nf * 1.428606765330187045e-06f;  // ... and the rest
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  V scale;
  reinterpret(scale, (n + 127) << 23);
  x = p * scale;
}

// e <- erfc(z) for z = |x| / sqrt 2 >= 0, given g = exp(-z^2) = exp(-x^2 / 2): e = t f(t) g with
// t = 1 / (1 + z / 2) and f(t) = erfcx(z) / t, which is smooth on t in [0, 1] and fitted by a
// degree-10 polynomial (scripts/fit_erfcx.py: relative error 1.4e-7 in float). GELU's derivative
// needs g anyway (the normal density), so Phi and phi share one exponential. Measured relative
// error of Phi (tests/ops/test_gelu.cpp): < 6e-7 for |x| < 4 and < 4e-6 for |x| <= 12 (the
// float rounding of the exponent -x^2 / 2 dominates); GELU needs 1e-5. Computing the complement
// directly keeps Phi(x) = erfc(-x / sqrt 2) / 2 relatively accurate for negative x, where
// 1 + erf would cancel.
template <class V>
VITPE_INLINE void erfc_times_exp(V& e, const V& z, const V& g) {
  const V t = 1.0f / (1.0f + 0.5f * z);
  V p = t * 4.2353194e-02f - 2.3086038e-01f;
  p = p * t + 4.8618412e-01f;
  p = p * t - 4.46983e-01f;
  p = p * t + 1.2709296e-01f;
  p = p * t - 5.723382e-02f;
  p = p * t + 9.300089e-02f;
  p = p * t + 1.7537679e-01f;
  p = p * t + 2.4688059e-01f;
  p = p * t + 2.8209385e-01f;
  p = p * t + 2.820948e-01f;
  e = p * t * g;
}

// cdf <- Phi(x), a third of normal_cdf's work and less exact: absolute error below 1e-6 (the
// float rounding of 1 - r near 0 dominates; so GELU's x Phi(x) is within 7e-7 of the exact
// value), and no exponential. Abramowitz & Stegun 7.1.28: erf(z) ~ 1 - (1 + a1 z + ... +
// a6 z^6)^-16 for z >= 0. For the int8 epilogue, whose inputs carry quantisation errors some
// 10^4 times larger; the f32 ops keep normal_cdf.
template <class V>
VITPE_INLINE void normal_cdf_fast(V& cdf, const V& x) {
  const V z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
  V p = z * 4.30638e-5f + 2.765672e-4f;
  p = p * z + 1.520143e-4f;
  p = p * z + 9.2705272e-3f;
  p = p * z + 4.22820123e-2f;
  p = p * z + 7.05230784e-2f;
  p = p * z + 1.0f;
  p = p * p;
  p = p * p;
  p = p * p;
  p = p * p;
  const V r = 0.5f / p;
  cdf = x >= 0.0f ? 1.0f - r : r;
}

// sums[j] = the sum over `rows` rows (ld floats apart) of x[i * ld + j], j < n, in float from 0,
// row by row: the bias gradients' column sums (runs of a linear's rows, or one attention pair's).
template <class V>
VITPE_INLINE void column_sums_of_rows(float* sums, const float* x, int64_t ld, int64_t rows,
                                      int64_t n) {
  constexpr int64_t w = kLanes<V>;
  int64_t j = 0;
  for (; j + w <= n; j += w) {
    V acc = V{};
    for (int64_t i = 0; i < rows; ++i) {
      V v;
      load(v, x + i * ld + j);
      acc = acc + v;
    }
    store(sums + j, acc);
  }
  for (; j < n; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < rows; ++i) acc += x[i * ld + j];
    sums[j] = acc;
  }
}
VITPE_AVX2 inline void column_sums_of_rows_avx2(float* sums, const float* x, int64_t ld,
                                                int64_t rows, int64_t n) {
  column_sums_of_rows<f32x8>(sums, x, ld, rows, n);
}
inline void column_sums_of_rows_base(float* sums, const float* x, int64_t ld, int64_t rows,
                                     int64_t n) {
  column_sums_of_rows<f32x4>(sums, x, ld, rows, n);
}

// GELU pieces: cdf <- Phi(x) (standard normal CDF) and pdf <- phi(x) (density), from one
// exponential; normal_cdf gives the same cdf bit for bit (the compiler drops the density).
template <class V>
VITPE_INLINE void normal_cdf_pdf(V& cdf, V& pdf, const V& x) {
  V g = x * x * -0.5f;
  exp_inplace(g);
  const V z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
  V e;
  erfc_times_exp(e, z, g);  // erfc(|x| / sqrt 2) = 2 Phi(-|x|)
  e = e * 0.5f;
  cdf = x >= 0.0f ? 1.0f - e : e;
  pdf = g * 0.3989422804014327f;
}
template <class V>
VITPE_INLINE void normal_cdf(V& cdf, const V& x) {
  V pdf;
  normal_cdf_pdf(cdf, pdf, x);
}

// The exponentials of a softmax row whose sum is `sum` that become 0 rather than be normalised:
// those under cut, where the probability would fall below twice the smallest normal float
// (logits ~87 or more under the row's maximum, such as Swin's -100 shift mask). They are below
// 1e-37, far under any other term's rounding, and a subnormal operand or result costs a
// microcode assist per multiply on Intel cores, in the normalising pass and in every product
// that reads the probabilities (5x slower attention for Swin's masked windows). Compare the
// exponentials before the multiply, which would make the subnormals itself.
inline float softmax_cut(float sum) { return 2.0f * std::numeric_limits<float>::min() * sum; }

// y <- softmax(x * scale + add0 + add1) over one row of n (add0 / add1 may be null; y may
// alias x). Returns the row's maximum logit and the sum of exponentials (for log-sum-exp).
template <class V>
VITPE_INLINE void softmax_row(float* y, const float* x, float scale, const float* add0,
                              const float* add1, int64_t n, float* max_out = nullptr,
                              float* sum_out = nullptr) {
  constexpr int64_t w = kLanes<V>;
  const int64_t nv = n / w * w;
  V vmax = V{} - 3.0e38f;
  float smax = -3.0e38f;
  for (int64_t j = 0; j < nv; j += w) {
    V v, a;
    load(v, x + j);
    v = v * scale;
    if (add0) {
      load(a, add0 + j);
      v = v + a;
    }
    if (add1) {
      load(a, add1 + j);
      v = v + a;
    }
    store(y + j, v);
    vmax = v > vmax ? v : vmax;
  }
  for (int64_t j = nv; j < n; ++j) {
    float v = x[j] * scale + (add0 ? add0[j] : 0.0f) + (add1 ? add1[j] : 0.0f);
    y[j] = v;
    smax = v > smax ? v : smax;
  }
  const float mx = hmax(vmax) > smax ? hmax(vmax) : smax;
  V vsum = V{};
  float ssum = 0.0f;
  for (int64_t j = 0; j < nv; j += w) {
    V v;
    load(v, y + j);
    v = v - mx;
    exp_inplace(v);
    store(y + j, v);
    vsum = vsum + v;
  }
  for (int64_t j = nv; j < n; ++j) {
    float v = y[j] - mx;
    exp_inplace(v);
    y[j] = v;
    ssum += v;
  }
  const float sum = hsum(vsum) + ssum;
  const float inv = 1.0f / sum;
  const float cut = softmax_cut(sum);
  const V vcut = V{} + cut;
  for (int64_t j = 0; j < nv; j += w) {
    V v;
    load(v, y + j);
    v = v < vcut ? V{} : v;
    v = v * inv;
    store(y + j, v);
  }
  for (int64_t j = nv; j < n; ++j) y[j] = y[j] < cut ? 0.0f : y[j] * inv;
  if (max_out) *max_out = mx;
  if (sum_out) *sum_out = sum;
}

}  // namespace vitpe::cpu
