// Attention's register tiles on AVX-512 (declared in ops/cpu/attention_tiles.h).
//
// Both products run one tile: R rows x 16 V columns (V = 2 for a panel of 32) in R * V
// accumulators, each step loading V vectors of a packed panel (the keys' transpose, or the
// values) and broadcasting one value per row (a query's, or an exponential's): 12 x 2 uses 24
// of the 32 registers. The tile is FMA-bound: a step issues R * V FMAs for V loads and R
// broadcasts.
#include "ops/cpu/attention_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "ops/cpu/vec_math.h"

// g++ 12's AVX-512 shuffle intrinsics start from _mm512_undefined_ps(), a self-initialised
// variable that -Wmaybe-uninitialized (or -Wuninitialized) reports wherever they are inlined (GCC
// bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace vitpe::cpu {

namespace {

// Columns of a panel: the packed keys and values are stored as panels of 32 columns (the last
// may have 16), each contiguous, so that a tile streams through one.
constexpr int64_t kPanel = 32;

// acc[r][v] = sum_k a[r, k] b[k, 16 v ..] over `depth` steps, for R rows (lda apart) and a
// panel b of V vectors of columns (its rows 16 V apart): the loop both products share. The
// panel's row length is a constant so that the loop's addresses fit the general registers: one
// pointer per row of a, the step and the panel (a run-time stride would spill one of them).
template <int R, int V>
VITPE_AVX512 VITPE_INLINE void accumulate(__m512 (&acc)[R][V], const float* a, int64_t lda,
                                          const float* b, int64_t depth) {
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    __m512 bk[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) bk[v] = _mm512_loadu_ps(b + k * 16 * V + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * lda + k]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bk[v], acc[r][v]);
    }
  }
}

// The outputs: c[r, 16 v ..] = scale[r] sum_k a[r, k] b[k, 16 v ..] (a: the exponentials, b: a
// panel of the packed values, depth: the keys, scale: 1 / the sums).
template <int R, int V>
VITPE_AVX512 void product_tile(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                               int64_t depth, const float* scale) {
  __m512 acc[R][V];
  accumulate<R, V>(acc, a, lda, b, depth);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    const __m512 sr = _mm512_set1_ps(scale[r]);
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v)
      _mm512_storeu_ps(c + r * ldc + 16 * v, _mm512_mul_ps(acc[r][v], sr));
  }
}

// What the logits of a row block add to q k^T: the scale, and the block's rows of the bias and
// mask (null: none), at the columns of the tile (lds/ldm apart).
struct LogitTerms {
  float scale;
  const float* bias;
  int64_t ldb;
  const float* mask;
  int64_t ldm;
};

// The logits: s[r, 16 v ..] = (q k^T)[r, ..] * scale + bias + mask (q: the queries, kt: a panel
// of the packed keys, depth: the head dimension), as the softmax needs them: the columns at or
// past `valid` become -inf, and each row's running maximum (16 floats, its lanes' maxima) takes
// the tile's values. Doing this while the sums are in registers spares the softmax a pass.
template <int R, int V>
VITPE_AVX512 void logits_tile(float* s, int64_t lds, const float* q, int64_t ldq, const float* kt,
                              int64_t depth, const LogitTerms& t, int64_t valid, float* rowmax) {
  __m512 acc[R][V];
  accumulate<R, V>(acc, q, ldq, kt, depth);
  __mmask16 keep[V];
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v) {
    const int64_t left = std::clamp<int64_t>(valid - 16 * v, 0, 16);
    keep[v] = static_cast<__mmask16>((1u << left) - 1);
  }
  const __m512 scale = _mm512_set1_ps(t.scale),
               none = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    __m512 mx = _mm512_load_ps(rowmax + 16 * r);
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      __m512 x = _mm512_mul_ps(acc[r][v], scale);
      if (t.bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep[v], t.bias + r * t.ldb + 16 * v));
      if (t.mask) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep[v], t.mask + r * t.ldm + 16 * v));
      x = _mm512_mask_mov_ps(none, keep[v], x);
      mx = _mm512_max_ps(mx, x);
      _mm512_storeu_ps(s + r * lds + 16 * v, x);
    }
    _mm512_store_ps(rowmax + 16 * r, mx);
  }
}

using ProductTile = void (*)(float*, int64_t, const float*, int64_t, const float*, int64_t,
                             const float*);
using LogitsTile = void (*)(float*, int64_t, const float*, int64_t, const float*, int64_t,
                            const LogitTerms&, int64_t, float*);

// The tiles of 1 .. kAttentionRowBlock rows, indexed by rows - 1.
template <int V, size_t... I>
constexpr std::array<ProductTile, sizeof...(I)> product_tiles(std::index_sequence<I...>) {
  return {&product_tile<static_cast<int>(I) + 1, V>...};
}
template <int V, size_t... I>
constexpr std::array<LogitsTile, sizeof...(I)> logits_tiles(std::index_sequence<I...>) {
  return {&logits_tile<static_cast<int>(I) + 1, V>...};
}
constexpr auto kRows = std::make_index_sequence<kAttentionRowBlock>();
// [panel width / 16 - 1][rows - 1]
constexpr std::array<std::array<ProductTile, kAttentionRowBlock>, 2> kTiles = {
    product_tiles<1>(kRows), product_tiles<2>(kRows)};
constexpr std::array<std::array<LogitsTile, kAttentionRowBlock>, 2> kLogitsTiles = {
    logits_tiles<1>(kRows), logits_tiles<2>(kRows)};

VITPE_AVX512 void pack_keys_avx512(float* kt, const float* k, int64_t ldk, int64_t n, int64_t hd) {
  const int64_t np = attention_tiles_keys(n);
  for (int64_t j0 = 0; j0 < np; j0 += 16) {
    // The panel of keys [c0, c0 + width) that keys j0 .. j0 + 15 fall in.
    const int64_t c0 = j0 / kPanel * kPanel, width = std::min(kPanel, np - c0);
    float* panel = kt + c0 * hd;
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < n ? _mm512_loadu_ps(k + (j0 + i) * ldk + d0) : _mm512_setzero_ps();
      // 16 x 16 transpose: pairs, then quadruples within each 128-bit lane, then the lanes.
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      // Lane l of r[4 i + c] now holds rows 4 i .. 4 i + 3 of column 4 l + c.
      for (int c = 0; c < 4; ++c) {
        const __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        const __m512 u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        const __m512 w0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
        float* col = panel + (d0 + c) * width + (j0 - c0);
        _mm512_storeu_ps(col, _mm512_shuffle_f32x4(u0, w0, 0x88));
        _mm512_storeu_ps(col + 4 * width, _mm512_shuffle_f32x4(u1, w1, 0x88));
        _mm512_storeu_ps(col + 8 * width, _mm512_shuffle_f32x4(u0, w0, 0xDD));
        _mm512_storeu_ps(col + 12 * width, _mm512_shuffle_f32x4(u1, w1, 0xDD));
      }
    }
  }
}

VITPE_AVX512 void pack_values_avx512(float* vp, const float* v, int64_t ldv, int64_t n,
                                     int64_t hd) {
  for (int64_t e0 = 0; e0 < hd; e0 += kPanel) {
    const int64_t width = std::min(kPanel, hd - e0);
    float* panel = vp + e0 * n;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t e = 0; e < width; e += 16)
        _mm512_storeu_ps(panel + j * width + e, _mm512_loadu_ps(v + j * ldv + e0 + e));
    }
  }
}

// Logits more than this under their row's maximum get no weight: exp(-60) is 8.8e-27, so an
// output over n keys changes by at most n x 8.8e-27 of its size (float rounds at 6e-8), and the
// products with the values never come near the subnormals that cost a microcode assist per
// multiply on Intel cores (Swin's shift mask puts whole blocks of logits 100 under the maximum).
constexpr float kFarBelow = -60.0f;

// exp(x) for kFarBelow <= x <= 0 (a logit minus its row's maximum): cpu::exp_inplace's
// reduction and polynomial, with 2^n applied by vscalefps instead of built from the exponent
// bits (fewer instructions per vector). x is clamped to kFarBelow: no result is subnormal.
VITPE_AVX512 VITPE_INLINE __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kFarBelow));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.9875691500e-4f), _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Rows of logits (scaled, biased and masked by logits_tile, -inf past the n keys) ->
// unnormalised exponentials in place, and their normalisers: for each row i, s = exp(s - max)
// over its attention_tiles_keys(n) columns (the logits kFarBelow under the maximum, and those
// past n, become 0) and inv[i] = 1 / their sum, which the output tile applies to its sums (a
// multiply per output instead of per probability). rowmax: the rows' maxima, 16 lanes each.
VITPE_AVX512 void softmax_rows_avx512(float* s, int64_t lds, int64_t rows, int64_t n,
                                      const float* rowmax, float* inv) {
  const int64_t nv = attention_tiles_keys(n) / 16;
  const __m512 far = _mm512_set1_ps(kFarBelow);
  for (int64_t i = 0; i < rows; ++i) {
    float* y = s + i * lds;
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_load_ps(rowmax + 16 * i)));
    // Two sums, alternating by vector, halve the chain of dependent adds.
    const auto exponential = [&](int64_t t, __m512& vsum) VITPE_AVX512_LAMBDA {
      const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(y + 16 * t), mx);
      const __mmask16 kept = _mm512_cmp_ps_mask(x, far, _CMP_GE_OQ);
      const __m512 e = _mm512_maskz_mov_ps(kept, exp_nonpositive(x));
      _mm512_storeu_ps(y + 16 * t, e);
      vsum = _mm512_add_ps(vsum, e);
    };
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    int64_t t = 0;
    for (; t + 2 <= nv; t += 2) {
      exponential(t, sum0);
      exponential(t + 1, sum1);
    }
    if (t < nv) exponential(t, sum0);
    inv[i] = 1.0f / _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
  }
}

}  // namespace

bool attention_tiles_take(int64_t hd) { return hd > 0 && hd % 16 == 0 && cpu_has_avx512(); }

void attention_pack(float* kt, float* vp, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n, int64_t hd) {
  pack_keys_avx512(kt, k, ldk, n, hd);
  pack_values_avx512(vp, v, ldv, n, hd);
}

void attention_tiles_rows(float* out, int64_t ldo, const float* q, int64_t ldq, const float* kt,
                          const float* vp, int64_t m, int64_t n, int64_t hd, float scale,
                          const float* bias, int64_t ldb, const float* mask, int64_t ldm,
                          float* s) {
  const int64_t np = attention_tiles_keys(n);
  // Blocks of at most kAttentionRowBlock rows, as even as they come (49 rows: 10, 10, 10, 10, 9).
  const int64_t blocks = (m + kAttentionRowBlock - 1) / kAttentionRowBlock;
  const int64_t per = (m + blocks - 1) / blocks;
  for (int64_t i0 = 0; i0 < m; i0 += per) {
    const int64_t rows = std::min(per, m - i0);
    const float* qb = q + i0 * ldq;
    alignas(64) float rowmax[kAttentionRowBlock * 16];
    std::fill_n(rowmax, rows * 16, -3.0e38f);
    for (int64_t c0 = 0; c0 < np; c0 += kPanel) {
      const int64_t width = std::min(kPanel, np - c0);
      const LogitTerms terms{scale, bias ? bias + i0 * ldb + c0 : nullptr, ldb,
                             mask ? mask + i0 * ldm + c0 : nullptr, ldm};
      kLogitsTiles[width / 16 - 1][rows - 1](s + c0, np, qb, ldq, kt + c0 * hd, hd, terms, n - c0,
                                             rowmax);
    }
    float inv[kAttentionRowBlock];
    softmax_rows_avx512(s, np, rows, n, rowmax, inv);
    for (int64_t e0 = 0; e0 < hd; e0 += kPanel) {
      const int64_t width = std::min(kPanel, hd - e0);
      kTiles[width / 16 - 1][rows - 1](out + i0 * ldo + e0, ldo, s, np, vp + e0 * n, n, inv);
    }
  }
}

}  // namespace vitpe::cpu
