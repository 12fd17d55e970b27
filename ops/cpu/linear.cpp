// Linear layers on oneDNN: y = act(x w^T + b) + residual with the activation and the residual
// add fused as post-ops of one matmul, and the backward (dx, dw by matmuls that accumulate
// through a sum post-op, db by a column reduction).
//
// Every primitive lives in the cache of ops/cpu/dnnl_cache.h, keyed by its shapes, dtypes and
// post-ops, so a repeated call allocates nothing of ours. With bf16 weights the product runs in
// bf16 (x converted into a scratch buffer), with f32 accumulation and output.
//
// Under FixedWorkSplit (training) the f32 products run in pieces fixed by the shapes, each a
// single-threaded oneDNN matmul, as the fused GELU ops always do: y and dx in blocks of rows
// (fixed_row_blocks), dw = dy^T x in tiles of its output, each tile's sum over the rows cut into
// a fixed number of chunks whose partial products are added in chunk order (weight_gradient).
// oneDNN's own split follows the thread count: on AVX2 a row's kernel depends on how the rows
// were shared out, and for a small dw over many rows (D 64: [192, 64] over 850 rows) it cuts
// the sum between the threads, so neither gives the same bits on another count.

#include <omp.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

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

dt dnnl_type(DType t) { return t == DType::bf16 ? dt::bf16 : dt::f32; }

// How the residual is added: a binary post-op reading it, or (when it is y itself) a sum
// post-op that adds what y held before the product.
enum class Residual : int64_t { none = 0, binary = 1, in_place = 2 };

// f32 -> bf16 (round to nearest even) of n values, on the thread pool.
void to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

const uint16_t* bf16_copy(ScratchSlot slot, const float* src, int64_t n) {
  auto* p = static_cast<uint16_t*>(scratch(slot, static_cast<size_t>(n) * sizeof(uint16_t)));
  to_bf16(p, src, n);
  return p;
}

// db[j] (+)= sum_i dy[i, j] for dy: [M, N]: runs of kColumnSumRows rows summed in float (whole
// rows, read once, split over the threads), then each column's runs added in double in run
// order, so long batches do not lose bits and the thread count does not change them. The fused
// GELU backwards sum their outputs the same way (gelu.cpp, linear_gelu_backward_rows), so a bias
// gradient has the same bits whichever op sums it.
void column_sums(float* db, const float* dy, int64_t m, int64_t n, bool accumulate) {
  const int64_t run = kColumnSumRows, runs = (m + run - 1) / run;
  float* part = scratch_f32(ScratchSlot::linear_2, static_cast<size_t>(runs * n));  // [runs, N]
  const bool avx2 = cpu_has_avx2_fma();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t i0 = r * run, rows = std::min(m, i0 + run) - i0;
      if (avx2)
        column_sums_of_rows_avx2(part + r * n, dy + i0 * n, n, rows, n);
      else
        column_sums_of_rows_base(part + r * n, dy + i0 * n, n, rows, n);
    }
#pragma omp for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      const float s = run_total(part, runs, n, j);
      db[j] = accumulate ? db[j] + s : s;
    }
  }
}

// The matmul primitive descriptor, or an error that says which product this CPU lacks.
dnnl::matmul::primitive_desc matmul_pd(const char* op, const dnnl::matmul::desc& d,
                                       const dnnl::primitive_attr& attr, int64_t m, int64_t k,
                                       int64_t n, DType w_dtype) {
  try {
    return dnnl::matmul::primitive_desc(d, attr, dnnl_engine());
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string(op) + ": oneDNN has no " + dtype_name(w_dtype) +
                             " matmul for M=" + std::to_string(m) + ", K=" + std::to_string(k) +
                             ", N=" + std::to_string(n) + " on this CPU (" + cpu_isa_name() +
                             "): " + e.what());
  }
}

}  // namespace

void require_bf16(const char* op) {
  if (!cpu_has_bf16()) {
    throw std::runtime_error(
        std::string(op) +
        ": bf16 weights need oneDNN's bf16 matmul, which needs an AVX-512 CPU (native with "
        "avx512_bf16 or AMX), but oneDNN reports '" +
        cpu_isa_name() + "' here; convert the weights to f32 (Tensor::to(DType::f32))");
  }
}

namespace {

// The plain weights' descriptor: w [N, K] row-major read as its transpose [K, N].
dnnl::memory::desc plain_weights_md(int64_t k, int64_t n, dt type) {
  return dnnl::memory::desc({k, n}, type, dims{1, k});
}

// The cached oneDNN matmul of linear_rows_forward for these sizes and options (built the first
// time, for the calling thread's thread count and slot in a parallel region). With `packed` (the
// layout of packed f32 weights) the entry reads that layout when oneDNN's matmul for these sizes
// prefers it, and marks so in its tag (1); otherwise, and always without, it reads the plain
// weights (tag 0). Its arguments, in order: x, w, the bias (b), y, the scale (scaled), the
// residual (Residual::binary); run_forward passes them.
CachedPrimitive& forward_primitive(int64_t m, int64_t k, int64_t n, DType w_dtype, bool b, Act act,
                                   Residual res, const dnnl::memory::desc* packed = nullptr,
                                   bool scaled = false) {
  PrimitiveKey key(OpKind::linear_forward);
  key.add(m).add(k).add(n).add(static_cast<int64_t>(w_dtype)).add(static_cast<int64_t>(b));
  key.add(static_cast<int64_t>(act)).add(static_cast<int64_t>(res)).add(packed != nullptr);
  key.add(scaled);

  CachedPrimitive& p = cached_primitive(key, [&](CachedPrimitive& e) {
    const dt in_t = dnnl_type(w_dtype);
    // x: [M, K] row-major; w: [N, K] read as its transpose [K, N] through strides.
    dnnl::memory::desc x_md({m, k}, in_t, dims{k, 1});
    dnnl::memory::desc w_md = plain_weights_md(k, n, in_t);
    dnnl::memory::desc b_md({1, n}, dt::f32, dims{n, 1});
    dnnl::memory::desc y_md({m, n}, dt::f32, dims{n, 1});
    dnnl::post_ops po;
    if (act == Act::gelu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
    // oneDNN's swish is x sigmoid(alpha x): quick_gelu with alpha 1.702.
    if (act == Act::quick_gelu) {
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, kQuickGeluAlpha, 0.f);
    }
    // The per-output scale: one value per column of y, broadcast over the rows.
    dnnl::memory::desc scale_md({1, n}, dt::f32, dims{n, 1});
    if (scaled) po.append_binary(dnnl::algorithm::binary_mul, scale_md);
    if (res == Residual::binary) po.append_binary(dnnl::algorithm::binary_add, y_md);
    if (res == Residual::in_place) po.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto make_pd = [&](const dnnl::memory::desc& weights) {
      auto d = b ? dnnl::matmul::desc(x_md, weights, b_md, y_md)
                 : dnnl::matmul::desc(x_md, weights, y_md);
      return matmul_pd("linear_forward", d, attr, m, k, n, w_dtype);
    };
    // With packed weights, the layout the matmul picks for itself: the packed one, or else
    // back to the plain weights.
    auto pd =
        make_pd(packed ? dnnl::memory::desc({k, n}, in_t, dnnl::memory::format_tag::any) : w_md);
    if (packed && pd.weights_desc() == *packed) {
      w_md = *packed;
      e.tag = 1;
    } else if (packed) {
      pd = make_pd(w_md);
    }
    e.init(dnnl::matmul(pd), pd.scratchpad_desc());
    e.bind(DNNL_ARG_SRC, x_md);
    e.bind(DNNL_ARG_WEIGHTS, w_md);
    if (b) e.bind(DNNL_ARG_BIAS, b_md);
    e.bind(DNNL_ARG_DST, y_md);
    int index = act != Act::none ? 1 : 0;  // position of the next post-op
    if (scaled) e.bind(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index++) | DNNL_ARG_SRC_1, scale_md);
    if (res == Residual::binary) {
      e.bind(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, y_md);
    }
  });
  return p;
}

// Runs an entry of forward_primitive on one block: its arguments in the order it bound them
// (the optional ones where they are not null).
void run_forward(CachedPrimitive& p, const void* x, const void* w, const float* b, float* y,
                 const float* scale, const float* residual) {
  const void* args[6];
  size_t n = 0;
  args[n++] = x;
  args[n++] = w;
  if (b) args[n++] = b;
  args[n++] = y;
  if (scale) args[n++] = scale;
  if (residual) args[n++] = residual;
  p.run(args, n);
}

// A backward matmul's attributes: the caller's scratchpad, and a sum post-op when it adds to its
// output.
dnnl::primitive_attr backward_attr(bool accumulate) {
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The cached oneDNN matmul of linear_rows_backward's dx = dy w (a sum post-op when accumulate).
CachedPrimitive& backward_data_primitive(int64_t m, int64_t k, int64_t n, DType w_dtype,
                                         bool accumulate) {
  PrimitiveKey key(OpKind::linear_backward_data);
  key.add(m).add(k).add(n).add(static_cast<int64_t>(w_dtype)).add(accumulate);
  return cached_primitive(key, [&](CachedPrimitive& e) {
    const dt in_t = dnnl_type(w_dtype);
    dnnl::memory::desc dy_md({m, n}, in_t, dims{n, 1});
    dnnl::memory::desc w_md({n, k}, in_t, dims{k, 1});
    dnnl::memory::desc dx_md({m, k}, dt::f32, dims{k, 1});
    const dnnl::primitive_attr attr = backward_attr(accumulate);
    auto pd = matmul_pd("linear_backward", dnnl::matmul::desc(dy_md, w_md, dx_md), attr, m, k, n,
                        w_dtype);
    e.init(dnnl::matmul(pd), pd.scratchpad_desc());
    e.bind(DNNL_ARG_SRC, dy_md);
    e.bind(DNNL_ARG_WEIGHTS, w_md);
    e.bind(DNNL_ARG_DST, dx_md);
  });
}

// Rows per block of the fused GELU ops' products, of m rows of n outputs: a block's outputs are
// at most about 512 KiB, so they are still in L2 for what follows them, and there are at least
// 12 blocks where blocks of 32 rows allow (at D 64, 850 rows of 128 were one block, on one
// thread); a multiple of the bias gradient's runs of rows. The shape alone decides.
int64_t block_rows(int64_t m, int64_t n) {
  const int64_t r = kColumnSumRows;
  const int64_t in_l2 = std::max<int64_t>(r, (int64_t{1} << 17) / std::max<int64_t>(n, 1) / r * r);
  const int64_t for_12 = std::max<int64_t>(r, ((m + 11) / 12 + r - 1) / r * r);
  return std::min(in_l2, for_12);
}

// Runs body(state, task) for every task in [0, tasks) in one parallel region whose threads take
// tasks as they finish the last (a thread that shares its core with another process does fewer),
// then after() on every thread (after the tasks' barrier). prepare(state) runs on each thread
// first: it makes the thread's primitives for every shape a task may have (and its oneDNN stream
// is made), so which tasks a thread happens to take allocates nothing after the first call, and
// oneDNN runs each on that thread alone. With one thread, or inside a caller's region, the same
// tasks in turn: the bits do not depend on the thread count. The first error stops the call and
// is rethrown after the region.
template <class State, class Prepare, class Body, class After>
void run_tasks(int64_t tasks, Prepare&& prepare, Body&& body, After&& after) {
  const bool parallel = tasks > 1 && omp_get_max_threads() > 1 && !omp_in_parallel();
  RegionError error;
#pragma omp parallel if (parallel)
  {
    omp_set_num_threads(1);
    State state{};
    bool ready = false;
    try {
      prepare(state);
      dnnl_stream();
      ready = true;
    } catch (...) {
      error.keep(std::current_exception());
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      if (!ready || error.stopped()) continue;
      try {
        body(state, t);
      } catch (...) {
        error.keep(std::current_exception());
      }
    }
    if (!error.stopped()) after();
  }
  if (error.error) std::rethrow_exception(error.error);
}

// Runs body(primitive, i0, rows) for each block of `rows` rows of m in one parallel region whose
// threads take blocks as they finish the last (a thread that shares its core with another
// process does fewer), then after() on every thread (after the blocks' barrier). make(rows)
// returns the calling thread's primitive for a block of that many rows: each thread makes both
// block shapes' (and its oneDNN stream) before taking blocks, so which blocks it happens to take
// allocates nothing after the first call, and oneDNN runs each on that thread alone. With one
// thread, or inside a caller's region, the same blocks in turn: the bits do not depend on the
// thread count. The first error stops the call and is rethrown after the region.
template <class Make, class Body, class After>
void row_blocks(int64_t m, int64_t rows, Make&& make, Body&& body, After&& after) {
  const int64_t blocks = (m + rows - 1) / rows, last = m - (blocks - 1) * rows;
  using Prims = std::array<CachedPrimitive*, 2>;  // a whole block's, the last block's
  run_tasks<Prims>(
      blocks,
      [&](Prims& p) {
        p[0] = &make(rows);
        p[1] = last == rows ? p[0] : &make(last);
      },
      [&](Prims& p, int64_t blk) {
        const int64_t i0 = blk * rows, mr = std::min(m, i0 + rows) - i0;
        body(*p[mr != rows], i0, mr);
      },
      after);
}

// The rows of a block of the plain f32 linears under FixedWorkSplit, by m alone: m cut into 1,
// 2, 3, 6 or 12 blocks of at least 128 rows, or 24 or 48 of at least 256 (counts that share out
// evenly over 1, 2, 3, 4, 6, 8, 12 threads). Each block's matmul repacks the weights, so a
// block is kept long enough for that and the call to be a small part of its work: at D 64
// (850 rows) 6 blocks of 142 rows, vit-fmnist's 6272 rows 24 blocks of 262 (the fused GELU ops
// use 256), ViT-S's 25216 rows 48 blocks of 526.
int64_t fixed_block_rows(int64_t m) {
  int64_t blocks = 1;
  for (int64_t b : {2, 3, 6, 12, 24, 48})
    if (m >= (b <= 12 ? 128 : 256) * b) blocks = b;
  return (m + blocks - 1) / blocks;
}

// The cached single-threaded matmul of one tile of a weight gradient: dw[n0:, k0:] (+)= dy^T x
// over `rows` rows, for dy: [., n] and x: [., k] row-major (a tile of tn x tk outputs).
CachedPrimitive& weight_tile_primitive(int64_t rows, int64_t tn, int64_t tk, int64_t n, int64_t k,
                                       bool accumulate) {
  PrimitiveKey key(OpKind::linear_weight_tiles);
  key.add(rows).add(tn).add(tk).add(n).add(k).add(accumulate);
  return cached_primitive(key, [&](CachedPrimitive& e) {
    dnnl::memory::desc dyt_md({tn, rows}, dt::f32, dims{1, n});  // dy^T: dy's columns as rows
    dnnl::memory::desc x_md({rows, tk}, dt::f32, dims{k, 1});
    dnnl::memory::desc dw_md({tn, tk}, dt::f32, dims{k, 1});
    const dnnl::primitive_attr attr = backward_attr(accumulate);
    auto pd = matmul_pd("linear_backward", dnnl::matmul::desc(dyt_md, x_md, dw_md), attr, rows, tk,
                        tn, DType::f32);
    e.init(dnnl::matmul(pd), pd.scratchpad_desc());
    e.bind(DNNL_ARG_SRC, dyt_md);
    e.bind(DNNL_ARG_WEIGHTS, x_md);
    e.bind(DNNL_ARG_DST, dw_md);
  });
}

// dw: [N, K] (+)= dy^T x for dy: [M, N], x: [M, K] under FixedWorkSplit. The output in tiles of
// 64 x 256; with fewer than 24 tiles each tile's sum over the M rows is cut into up to 24 / tiles
// chunks of at least 128 rows (so there is work for the threads: D 64's [192, 64] over 850 rows
// is 3 tiles x 6 chunks, vit-fmnist's qkv [384, 128] over 6272 rows 6 x 4), all by the shape
// alone. Chunk 0 adds into dw, the others write partial products that are then added to dw in
// chunk order; each tile and chunk is one single-threaded matmul. The partial products take at
// most 24 tiles' worth of floats (1.5 MiB).
void weight_gradient(float* dw, const float* dy, const float* x, int64_t m, int64_t k, int64_t n,
                     bool accumulate) {
  constexpr int64_t kTileN = 64, kTileK = 256, kTasks = 24, kMinChunkRows = 128;
  const int64_t tiles_n = (n + kTileN - 1) / kTileN, tiles_k = (k + kTileK - 1) / kTileK;
  const int64_t tiles = tiles_n * tiles_k;
  const int64_t chunks =
      std::clamp<int64_t>((kTasks + tiles - 1) / tiles, 1, std::max<int64_t>(1, m / kMinChunkRows));
  float* part = chunks > 1 ? scratch_f32(ScratchSlot::linear_3,
                                         static_cast<size_t>((chunks - 1) * n * k))  // [C-1, N, K]
                           : nullptr;
  // Chunk c holds rows [c m / C, (c + 1) m / C): floor(m / C) or one more.
  auto chunk_begin = [&](int64_t c) { return c * m / chunks; };
  const int64_t short_rows = m / chunks;
  const int64_t last_n = n - (tiles_n - 1) * kTileN, last_k = k - (tiles_k - 1) * kTileK;
  // By [chunk rows: short, long][tile rows: whole, last][tile columns: whole, last][chunk 0,
  // a later one], made for the shapes that occur.
  using Prims = std::array<CachedPrimitive*, 16>;
  auto slot = [](int64_t longer, bool last_rows, bool last_cols, bool later) {
    return static_cast<size_t>(longer * 8 + last_rows * 4 + last_cols * 2 + later);
  };
  run_tasks<Prims>(
      tiles * chunks,
      [&](Prims& p) {
        for (int64_t longer = 0; longer < (m % chunks ? 2 : 1); ++longer) {
          for (bool last_rows : {false, true}) {
            if (!last_rows && tiles_n == 1) continue;
            for (bool last_cols : {false, true}) {
              if (!last_cols && tiles_k == 1) continue;
              for (bool later : {false, true}) {
                if (later && chunks == 1) continue;
                p[slot(longer, last_rows, last_cols, later)] = &weight_tile_primitive(
                    short_rows + longer, last_rows ? last_n : kTileN, last_cols ? last_k : kTileK,
                    n, k, later ? false : accumulate);
              }
            }
          }
        }
      },
      [&](Prims& p, int64_t task) {
        const int64_t c = task / tiles, tile = task % tiles;
        const int64_t ti = tile / tiles_k, tj = tile % tiles_k;
        const int64_t r0 = chunk_begin(c), rows = chunk_begin(c + 1) - r0;
        const int64_t n0 = ti * kTileN, k0 = tj * kTileK;
        float* out = (c == 0 ? dw : part + (c - 1) * n * k) + n0 * k + k0;
        p[slot(rows - short_rows, ti == tiles_n - 1, tj == tiles_k - 1, c > 0)]->run(
            {dy + r0 * n + n0, x + r0 * k + k0, out});
      },
      [&] {
        if (chunks == 1) return;
      // The chunks' partial products added in chunk order.
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n * k; ++i) {
          float s = dw[i];
          for (int64_t c = 0; c + 1 < chunks; ++c) s += part[c * n * k + i];
          dw[i] = s;
        }
      });
}

}  // namespace

void linear_rows_forward(float* y, const float* x, const void* w, DType w_dtype, const float* b,
                         int64_t m, int64_t k, int64_t n, Act act, const float* residual,
                         const PackedWeights* packed, const float* scale) {
  if (m == 0) return;
  const bool bf16 = w_dtype == DType::bf16;
  if (bf16) require_bf16("linear_forward");
  const Residual res = !residual       ? Residual::none
                       : residual == y ? Residual::in_place
                                       : Residual::binary;
  const auto* layout = packed && packed->packed() && !bf16
                           ? static_cast<const dnnl::memory::desc*>(packed->layout.get())
                           : nullptr;
  // The weights an entry reads: the packed copy where it reads that layout.
  auto weights = [&](const CachedPrimitive& p) -> const void* {
    return p.tag == 1 ? packed->data.raw() : w;
  };
  if (!bf16 && FixedWorkSplit::active()) {
    row_blocks(
        m, fixed_block_rows(m),
        [&](int64_t mr) -> CachedPrimitive& {
          return forward_primitive(mr, k, n, w_dtype, b != nullptr, act, res, layout,
                                   scale != nullptr);
        },
        [&](CachedPrimitive& p, int64_t i0, int64_t mr) {
          run_forward(p, x + i0 * k, weights(p), b, y + i0 * n, scale,
                      res == Residual::binary ? residual + i0 * n : nullptr);
        },
        [] {});
    return;
  }
  // GELU on AVX-512: vitpe's table GELU over the product (gelu_rows, some 16 cycles per 16
  // values) instead of oneDNN 2.6's gelu_erf post-op (some 50): ViT-S's fc1 at batch 8
  // 8.26 -> 7.79 ms, Swin-T's first stage 1.42 -> 1.16 ms (2 threads, Xeon).
  const bool own_gelu = act == Act::gelu && res == Residual::none && !scale && cpu_has_avx512();
  CachedPrimitive& p = forward_primitive(m, k, n, w_dtype, b != nullptr, own_gelu ? Act::none : act,
                                         res, layout, scale != nullptr);
  const void* xin = bf16 ? static_cast<const void*>(bf16_copy(ScratchSlot::linear_0, x, m * k))
                         : static_cast<const void*>(x);
  run_forward(p, xin, weights(p), b, y, scale, res == Residual::binary ? residual : nullptr);
  if (own_gelu) gelu_rows(y, y, m * n);
}

void linear_rows_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                          const void* w, DType w_dtype, int64_t m, int64_t k, int64_t n,
                          bool accumulate) {
  const bool bf16 = w_dtype == DType::bf16;
  if (m == 0) {
    // No rows: the weight gradients are sums over nothing.
    if (!accumulate && dw) std::fill(dw, dw + n * k, 0.0f);
    if (!accumulate && db) std::fill(db, db + n, 0.0f);
    return;
  }
  const bool fixed = !bf16 && FixedWorkSplit::active();
  if (dx && fixed) {
    row_blocks(
        m, fixed_block_rows(m),
        [&](int64_t mr) -> CachedPrimitive& {
          return backward_data_primitive(mr, k, n, w_dtype, accumulate);
        },
        [&](CachedPrimitive& p, int64_t i0, int64_t mr) {
          p.run({dy + i0 * n, w, dx + i0 * k});
        },
        [] {});
  } else if (dx) {
    // dx: [M, K] (+)= dy [M, N] @ w [N, K]
    if (bf16) require_bf16("linear_backward");
    CachedPrimitive& p = backward_data_primitive(m, k, n, w_dtype, accumulate);
    const void* dyin = bf16 ? static_cast<const void*>(bf16_copy(ScratchSlot::linear_1, dy, m * n))
                            : static_cast<const void*>(dy);
    p.run({dyin, w, dx});
  }
  if (dw && fixed) {
    weight_gradient(dw, dy, x, m, k, n, accumulate);
  } else if (dw) {
    // dw: [N, K] (+)= dy^T [N, M] @ x [M, K]; dy^T is dy read through strides.
    PrimitiveKey key(OpKind::linear_backward_weights);
    key.add(m).add(k).add(n).add(accumulate);
    CachedPrimitive& p = cached_primitive(key, [&](CachedPrimitive& e) {
      dnnl::memory::desc dyt_md({n, m}, dt::f32, dims{1, n});
      dnnl::memory::desc x_md({m, k}, dt::f32, dims{k, 1});
      dnnl::memory::desc dw_md({n, k}, dt::f32, dims{k, 1});
      const dnnl::primitive_attr attr = backward_attr(accumulate);
      auto pd = matmul_pd("linear_backward", dnnl::matmul::desc(dyt_md, x_md, dw_md), attr, m, k, n,
                          DType::f32);
      e.init(dnnl::matmul(pd), pd.scratchpad_desc());
      e.bind(DNNL_ARG_SRC, dyt_md);
      e.bind(DNNL_ARG_WEIGHTS, x_md);
      e.bind(DNNL_ARG_DST, dw_md);
    });
    p.run({dy, x, dw});
  }
  if (db) column_sums(db, dy, m, n, accumulate);
}

}  // namespace cpu

namespace {

// Checks shared by forward and backward; returns M (rows) for x: [..., K], w: [N, K].
int64_t check_linear(const char* op, const Tensor& x, const Tensor& w) {
  check_cpu_f32(op, "x", x);
  if (!w.defined()) throw ShapeError(std::string(op) + ": w is undefined");
  if (w.device() != Device::cpu) {
    throw std::invalid_argument(std::string(op) + ": expected w on the cpu, found " +
                                device_name(w.device()));
  }
  if (w.ndim() != 2) {
    throw ShapeError(std::string(op) + ": expected w of shape [N, K], found " + w.shape().str());
  }
  if (x.ndim() < 1 || x.size(-1) != w.size(1)) {
    throw ShapeError(std::string(op) + ": x " + x.shape().str() + " has last dimension " +
                     (x.ndim() ? std::to_string(x.size(-1)) : std::string("(none)")) + " but w " +
                     w.shape().str() + " expects K = " + std::to_string(w.size(1)));
  }
  if (w.size(0) == 0 || w.size(1) == 0) {
    throw ShapeError(std::string(op) + ": w " + w.shape().str() + " has an empty dimension");
  }
  return x.numel() / w.size(1);
}

}  // namespace

namespace cpu {

void check_weight_matrix(const char* op, const Tensor& w) {
  check_cpu_f32(op, "w", w);
  if (w.ndim() != 2 || w.size(0) == 0 || w.size(1) == 0) {
    throw ShapeError(std::string(op) + ": expected w of shape [N, K] with N, K > 0, found " +
                     w.shape().str());
  }
}

void check_linear_outputs(const char* op, const Tensor& x, const Tensor& y, const Tensor& b,
                          const Tensor& residual, int64_t n, int64_t m, const Tensor& scale) {
  const Shape ys = x.shape().with_last(n);
  check_shape(op, "y", y, ys);
  check_cpu_f32(op, "y", y);
  if (b.defined()) {
    check_shape(op, "b", b, Shape{n});
    check_cpu_f32(op, "b", b);
  }
  if (residual.defined()) {
    check_shape(op, "residual", residual, ys);
    check_cpu_f32(op, "residual", residual);
  }
  if (scale.defined()) {
    check_shape(op, "scale", scale, Shape{n});
    check_cpu_f32(op, "scale", scale);
  }
  if (m > 0 && y.raw() == x.raw()) {
    throw std::invalid_argument(std::string(op) +
                                ": y must not be x itself (the product reads x while it writes "
                                "y); the residual may be y");
  }
}

void linear_gelu_rows(float* y, float* d, const float* x, const float* w, const float* b, int64_t m,
                      int64_t k, int64_t n) {
  if (m == 0) return;
  row_blocks(
      m, std::min(m, block_rows(m, n)),
      [&](int64_t mr) -> CachedPrimitive& {
        return forward_primitive(mr, k, n, DType::f32, b != nullptr, Act::none, Residual::none);
      },
      [&](CachedPrimitive& p, int64_t i0, int64_t mr) {
        // The block's product into d, then y = GELU and d = GELU' over it while it is in cache.
        if (b)
          p.run({x + i0 * k, w, b, d + i0 * n});
        else
          p.run({x + i0 * k, w, d + i0 * n});
        gelu_with_derivative_rows(y + i0 * n, d + i0 * n, d + i0 * n, mr * n);
      },
      [] {});
}

void linear_gelu_backward_rows(float* dx, float* sums, const float* dy, const float* w,
                               const float* d, int64_t m, int64_t k, int64_t n) {
  if (m == 0) return;
  const int64_t run = kColumnSumRows, runs = (m + run - 1) / run;
  float* part = scratch_f32(ScratchSlot::linear_2, static_cast<size_t>(runs * k));  // [runs, K]
  row_blocks(
      m, std::min(m, block_rows(m, k)),
      [&](int64_t mr) -> CachedPrimitive& {
        return backward_data_primitive(mr, k, n, DType::f32, false);
      },
      [&](CachedPrimitive& p, int64_t i0, int64_t mr) {
        // The block's product, then its GELU factor and its runs' column sums while in cache.
        p.run({dy + i0 * n, w, dx + i0 * k});
        for (int64_t r0 = i0; r0 < i0 + mr; r0 += run) {
          const int64_t rr = std::min(i0 + mr, r0 + run) - r0;
          gelu_backward_run(dx + r0 * k, dx + r0 * k, d + r0 * k, rr, k, part + r0 / run * k);
        }
      },
      [&] {
  // The columns' sums over the runs, in run order.
#pragma omp for schedule(static)
        for (int64_t j = 0; j < k; ++j) sums[j] += run_total(part, runs, k, j);
      });
}

}  // namespace cpu

void linear_gelu_backward_data(Tensor& dx, const Tensor& dy, const Tensor& w,
                               const Tensor& gelu_derivative, Tensor& column_sums) {
  const char* op = "linear_gelu_backward_data";
  if (w.ndim() != 2) {
    throw ShapeError(std::string(op) + ": expected w of shape [N, K], found " + w.shape().str());
  }
  const int64_t n = w.size(0), k = w.size(1);
  if (w.dtype() != DType::f32) {
    throw std::invalid_argument(std::string(op) + ": the weights must be f32 (training), found " +
                                dtype_name(w.dtype()));
  }
  check_cpu_f32(op, "gelu_derivative", gelu_derivative);
  if (gelu_derivative.ndim() < 1 || gelu_derivative.size(-1) != k) {
    throw ShapeError(std::string(op) + ": expected gelu_derivative [..., " + std::to_string(k) +
                     "] for w " + w.shape().str() + ", found " + gelu_derivative.shape().str());
  }
  check_cpu_f32(op, "dy", dy);
  check_shape(op, "dy", dy, gelu_derivative.shape().with_last(n));
  check_cpu_f32(op, "dx", dx);
  check_shape(op, "dx", dx, gelu_derivative.shape());
  check_cpu_f32(op, "column_sums", column_sums);
  check_shape(op, "column_sums", column_sums, Shape{k});
  const int64_t m = k == 0 ? 0 : gelu_derivative.numel() / k;
  if (m > 0 && (dx.raw() == dy.raw() || dx.raw() == w.raw())) {
    throw std::invalid_argument(std::string(op) + ": dx must be neither dy nor w");
  }
  // One op of the profile's linear class: the GELU factor and the sums run inside it.
  const OpScope scope(OpClass::linear, 2.0 * static_cast<double>(m) * k * n);
  cpu::linear_gelu_backward_rows(dx.f32(), column_sums.f32(), dy.f32(), w.f32(),
                                 gelu_derivative.f32(), m, k, n);
}

void linear_gelu_forward_with_derivative(Tensor& y, Tensor& dydx, const Tensor& x, const Tensor& w,
                                         const Tensor& b) {
  const char* op = "linear_gelu_forward_with_derivative";
  const int64_t m = check_linear(op, x, w);
  const int64_t k = w.size(1), n = w.size(0);
  if (w.dtype() != DType::f32) {
    throw std::invalid_argument(std::string(op) + ": the weights must be f32 (training), found " +
                                dtype_name(w.dtype()));
  }
  cpu::check_linear_outputs(op, x, y, b, Tensor(), n, m);
  check_cpu_f32(op, "dydx", dydx);
  check_shape(op, "dydx", dydx, y.shape());
  if (m > 0 && (dydx.raw() == y.raw() || dydx.raw() == x.raw())) {
    throw std::invalid_argument(std::string(op) + ": dydx must be neither y nor x");
  }
  // One op of the profile's linear class: the GELU runs inside it, on the products in cache.
  const OpScope scope(OpClass::linear, 2.0 * static_cast<double>(m) * k * n);
  cpu::linear_gelu_rows(y.f32(), dydx.f32(), x.f32(), w.f32(), b.defined() ? b.f32() : nullptr, m,
                        k, n);
}

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Act act,
                    const Tensor& residual, const Tensor& scale) {
  const char* op = "linear_forward";
  const int64_t m = check_linear(op, x, w);
  const int64_t k = w.size(1), n = w.size(0);
  cpu::check_linear_outputs(op, x, y, b, residual, n, m, scale);
  const OpScope scope(OpClass::linear, 2.0 * static_cast<double>(m) * k * n);
  cpu::linear_rows_forward(y.f32(), x.f32(), w.raw(), w.dtype(), b.defined() ? b.f32() : nullptr, m,
                           k, n, act, residual.defined() ? residual.f32() : nullptr, nullptr,
                           scale.defined() ? scale.f32() : nullptr);
}

PackedWeights pack_weights(const Tensor& w) {
  const char* op = "pack_weights";
  cpu::check_weight_matrix(op, w);
  const int64_t n = w.size(0), k = w.size(1);
  PackedWeights out;
  out.plain = w;
  // The layout oneDNN's matmul picks for these weights. It does not depend on the rows (oneDNN
  // 2.6's AVX-512 brgemm takes blocks of 16 x 64 for 1 to 25,088 rows; forward_primitive checks
  // it for each call's rows anyway), so one probe size stands for all.
  constexpr int64_t kProbeRows = 256;
  const dnnl::memory::desc x_md({kProbeRows, k}, cpu::dt::f32, cpu::dims{k, 1});
  const dnnl::memory::desc y_md({kProbeRows, n}, cpu::dt::f32, cpu::dims{n, 1});
  const dnnl::memory::desc any_md({k, n}, cpu::dt::f32, dnnl::memory::format_tag::any);
  const dnnl::memory::desc plain = cpu::plain_weights_md(k, n, cpu::dt::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto pd = cpu::matmul_pd(op, dnnl::matmul::desc(x_md, any_md, y_md), attr, kProbeRows, k, n,
                                 DType::f32);
  const dnnl::memory::desc layout = pd.weights_desc();
  // Only a blocked layout is packed: where the matmul prefers the plain one, or a plain
  // permutation of it (AVX2's gemm:jit asks for w^T row-major, and runs ViT-S/16's batch 1
  // 1.09x slower on that copy than on w itself), it reads w.
  if (layout == plain || layout.data.format_kind != dnnl_blocked ||
      layout.data.format_desc.blocking.inner_nblks == 0) {
    return out;
  }
  const size_t bytes = layout.get_size();
  Tensor data =
      Tensor::empty(Shape{static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
  dnnl::memory src(plain, cpu::dnnl_engine(), const_cast<void*>(w.raw()));
  dnnl::memory dst(layout, cpu::dnnl_engine(), data.raw());
  dnnl::reorder(src, dst).execute(cpu::dnnl_stream(), src, dst);
  cpu::dnnl_stream().wait();
  out.data = std::move(data);
  out.layout = std::make_shared<const dnnl::memory::desc>(layout);
  return out;
}

void linear_forward(Tensor& y, const Tensor& x, const PackedWeights& w, const Tensor& b, Act act,
                    const Tensor& residual, const Tensor& scale) {
  const char* op = "linear_forward";
  if (!w.defined()) {
    throw std::invalid_argument(std::string(op) +
                                ": w holds no weights; make them with pack_weights");
  }
  const int64_t m = check_linear(op, x, w.plain);
  const int64_t k = w.plain.size(1), n = w.plain.size(0);
  if (w.packed() &&
      (!w.layout || w.plain.dtype() != DType::f32 ||
       static_cast<const dnnl::memory::desc*>(w.layout.get())->get_size() > w.data.nbytes())) {
    throw std::invalid_argument(std::string(op) + ": the packed copy of w " +
                                w.plain.shape().str() +
                                " does not match its layout; make it with pack_weights");
  }
  cpu::check_linear_outputs(op, x, y, b, residual, n, m, scale);
  const OpScope scope(OpClass::linear, 2.0 * static_cast<double>(m) * k * n);
  cpu::linear_rows_forward(y.f32(), x.f32(), w.plain.raw(), w.plain.dtype(),
                           b.defined() ? b.f32() : nullptr, m, k, n, act,
                           residual.defined() ? residual.f32() : nullptr, &w,
                           scale.defined() ? scale.f32() : nullptr);
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, GradWrite dx_write) {
  const char* op = "linear_backward";
  const int64_t m = check_linear(op, x, w);
  const int64_t k = w.size(1), n = w.size(0);
  const OpScope scope(OpClass::linear, 2.0 * static_cast<double>(m) * k * n *
                                           (int{dx.defined()} + int{dw.defined()}));
  check_shape(op, "dy", dy, x.shape().with_last(n));
  check_cpu_f32(op, "dy", dy);
  if (dx.defined()) {
    check_shape(op, "dx", dx, x.shape());
    check_cpu_f32(op, "dx", dx);
  }
  if (dw.defined()) {
    check_shape(op, "dw", dw, w.shape());
    check_cpu_f32(op, "dw", dw);
  }
  if (db.defined()) {
    check_shape(op, "db", db, Shape{n});
    check_cpu_f32(op, "db", db);
  }
  float* dx_rows = dx.defined() ? dx.f32() : nullptr;
  if (dx_rows && dx_write == GradWrite::overwrite) {
    // dx by its own product without a sum post-op (neither zeroed nor read); the parameter
    // gradients below still accumulate.
    cpu::linear_rows_backward(dx_rows, nullptr, nullptr, dy.f32(), nullptr, w.raw(), w.dtype(), m,
                              k, n, /*accumulate=*/false);
    dx_rows = nullptr;
  }
  if (!dx_rows && !dw.defined() && !db.defined()) return;
  cpu::linear_rows_backward(dx_rows, dw.defined() ? dw.f32() : nullptr,
                            db.defined() ? db.f32() : nullptr, dy.f32(), x.f32(), w.raw(),
                            w.dtype(), m, k, n);
}

}  // namespace vitpe
