// oneDNN plumbing shared by the CPU ops: one engine and stream for the process, a cache of
// ready-to-run primitives, a batched matmul helper, and per-thread scratch buffers.
//
// Steady state allocates nothing of ours: a cache entry keeps the primitive together with its
// dnnl::memory objects, its argument array and a user-managed scratchpad, so a repeated call
// with the same shapes only swaps data pointers. Keys are fixed-size PODs hashed without
// allocating. (oneDNN 2.6 itself still makes a few small, short-lived heap allocations inside
// every execution: the argument map dnnl_primitive_execute builds and the std::function of its
// parallel loop; tests/ops/test_allocations.cpp counts them apart.) oneDNN here is 2.6 (pre-3.0
// API: op descriptors, output scales).
//
// Typical use from an op file (see matmul() below for the ready-made batched matmul):
//
//   cpu::PrimitiveKey key(cpu::OpKind::my_op);
//   key.add(m).add(n).add(flags);
//   cpu::CachedPrimitive& p = cpu::cached_primitive(key, [&](cpu::CachedPrimitive& e) {
//     auto pd = ...;                       // build the primitive descriptor (user scratchpad)
//     e.init(dnnl::my_op(pd), pd.scratchpad_desc());
//     e.bind(DNNL_ARG_SRC, pd.src_desc()); // slot 0
//     e.bind(DNNL_ARG_DST, pd.dst_desc()); // slot 1
//   });
//   p.run({src_ptr, dst_ptr});              // pointers in bind order
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"  // compute_stream

namespace vitpe::cpu {

// ---- engine and stream ------------------------------------------------------------------------
// The process-wide CPU engine, and the calling thread's (in-order, synchronous) stream on it.
dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

// ---- batched matmul ---------------------------------------------------------------------------
// For b in [0, batch):   C[b] = alpha * op(A[b]) @ op(B[b])  (+ C[b] when accumulate)
// with op(A[b]): [M, K], op(B[b]): [K, N], C[b]: [M, N], all f32, row-major with strides:
// - trans_a = false: A[b] is stored [M, K] with row stride lda (>= K);
//   trans_a = true:  A[b] is stored [K, M] with row stride lda (>= M) and used transposed.
// - trans_b = false: B[b] is stored [K, N] with row stride ldb (>= N);
//   trans_b = true:  B[b] is stored [N, K] with row stride ldb (>= K) and used transposed
//   (q k^T for q, k: [.., N, hd] is trans_b = true).
// - C[b] is stored [M, N] with row stride ldc (>= N).
// - ld* = 0 means tight (the stored row length).
// - stride_* is the distance in elements between consecutive batch entries; -1 means tight
//   (rows * ld). stride_a or stride_b = 0 broadcasts one matrix to every batch entry.
// Example, attention logits for q, k: [BH, N, hd] -> s: [BH, N, N]:
//   matmul({.batch = BH, .m = N, .n = N, .k = hd, .trans_b = true, .alpha = scale}, q, k, s);
// To add a bias to the logits, write the bias into C first and set accumulate = true.
// The primitive for a spec is built on first use and cached; later calls allocate nothing.
// Thread-safe; each call runs on the whole thread pool, so call it from outside parallel
// regions (inside an OpenMP parallel region oneDNN runs it on the calling thread only).
struct MatmulSpec {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;
  bool trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = -1, stride_b = -1, stride_c = -1;
  float alpha = 1.0f;
  bool accumulate = false;
};
void matmul(const MatmulSpec& spec, const float* a, const float* b, float* c);

// ---- per-thread scratch buffers ---------------------------------------------------------------
// A 64-byte aligned buffer of at least `bytes`, owned by the calling thread and identified by
// `slot`; it only grows, so steady-state calls allocate nothing. The pointer stays valid until
// the next scratch() call with the same slot on the same thread. Contents are unspecified.
enum class ScratchSlot : int {
  patch_embed_cols = 0,   // ops/cpu/patch_embed.cpp: im2col of the input
  patch_embed_dcols = 1,  // ops/cpu/patch_embed.cpp: gradient of the im2col matrix
  attention_0 = 2,        // ops/cpu/attention.cpp: free for its use
  attention_1 = 3,
  attention_2 = 4,
  attention_3 = 5,
  linear_0 = 6,  // ops/cpu/linear.cpp (bf16 conversions), ops/cpu/linear_int8.cpp
  linear_1 = 7,
  linear_2 = 8,
  layernorm_0 = 9,     // ops/cpu/layernorm.cpp: the backward's partial sums
  elementwise_0 = 10,  // ops/cpu/gelu.cpp: partial column sums
  linear_3 = 11,       // ops/cpu/linear.cpp: a weight gradient's partial sums
  count = 12
};
void* scratch(ScratchSlot slot, size_t bytes);
inline float* scratch_f32(ScratchSlot slot, size_t count) {
  return static_cast<float*>(scratch(slot, count * sizeof(float)));
}

// ---- primitive cache --------------------------------------------------------------------------
enum class OpKind : uint32_t {
  matmul = 1,
  linear_forward = 2,
  linear_backward_data = 3,
  linear_backward_weights = 4,
  bias_backward = 5,
  linear_int8 = 6,
  linear_weight_tiles = 7,
  attention = 16,  // 16..31 reserved for ops/cpu/attention.cpp
  other = 64,      // 64.. free for other op files: use distinct values per op
};

// Fixed-size key: an op kind plus up to kMaxValues integers (shapes, strides, dtypes, flags,
// post-op parameters: add float parameters bit-cast with add_float).
struct PrimitiveKey {
  static constexpr int kMaxValues = 30;
  uint32_t kind = 0;
  int32_t count = 0;
  int64_t values[kMaxValues] = {};

  explicit PrimitiveKey(OpKind k) : kind(static_cast<uint32_t>(k)) {}
  PrimitiveKey(OpKind k, uint32_t sub) : kind(static_cast<uint32_t>(k) + sub) {}
  PrimitiveKey& add(int64_t v);  // throws std::logic_error when full
  PrimitiveKey& add_float(float v);
  bool operator==(const PrimitiveKey& o) const;
  size_t hash() const;
};

// A primitive ready to run: its argument memories are created once (bind) and only their
// data handles change per call (run). The entry owns a user-managed scratchpad.
class CachedPrimitive {
 public:
  static constexpr int kMaxArgs = 12;

  // Setup, called once from the creation callback (init, then bind each argument).
  void init(dnnl::primitive prim, const dnnl::memory::desc& scratchpad_desc);
  // Adds an argument; run() takes one pointer per bound argument, in bind order.
  void bind(int arg, const dnnl::memory::desc& md);
  int num_args() const { return nargs_; }

  // Sets the data pointers (in bind order; nullptr for an argument is not allowed) and
  // executes on the global stream. Thread-safe: concurrent runs of one entry serialise.
  void run(std::initializer_list<const void*> ptrs) { run(ptrs.begin(), ptrs.size()); }
  // The same for `count` pointers from `ptrs` (an op whose arguments depend on its options).
  void run(const void* const* ptrs, size_t count);
  // The implementation oneDNN chose (its impl_info_str, e.g. "brg:avx512_core").
  const std::string& impl() const { return impl_; }
  // A value the op that built the entry keeps with it (set in the creation callback): the f32
  // linear marks there whether the entry reads packed weights.
  int64_t tag = 0;

 private:
  std::mutex mu_;
  dnnl::primitive prim_;
  std::string impl_;
  dnnl::memory scratchpad_;
  dnnl::memory mems_[kMaxArgs];
  dnnl_exec_arg_t args_[kMaxArgs + 1] = {};
  int nargs_ = 0;
};

// Which oneDNN implementations run, for `vitpe bench ops`: from start_kernel_record() on, every
// CachedPrimitive run adds its impl() (once each); recorded_kernels() returns them in first-run
// order and stops recording. Off, a run pays one relaxed atomic load.
void start_kernel_record();
std::vector<std::string> recorded_kernels();

// Looks up `key`; returns nullptr when absent. Does not allocate.
CachedPrimitive* find_primitive(const PrimitiveKey& key);
// Inserts a freshly built entry (or returns the one another thread inserted first).
CachedPrimitive& insert_primitive(const PrimitiveKey& key, std::unique_ptr<CachedPrimitive> p);
// Number of entries built so far (tests check that repeated calls reuse entries).
int64_t primitive_cache_size();

// Returns the cached entry for `key`, building it with create(CachedPrimitive&) the first time.
// The compute thread count of the calling thread (OpenMP's, which oneDNN uses).
int64_t primitive_threads();
// -1 outside a parallel region, else the calling thread's number in it.
int64_t primitive_thread_slot();

template <class Create>
CachedPrimitive& cached_primitive(PrimitiveKey key, Create&& create) {
  // oneDNN's OpenMP primitives divide their work for the thread count they are created with; a
  // call under another count (set_num_threads, a Classifier with its own) gets its own entry.
  key.add(primitive_threads());
  // Inside a parallel region each thread runs its own entry (an entry runs one call at a time),
  // and so does each compute stream.
  key.add(primitive_thread_slot());
  key.add(compute_stream());
  if (CachedPrimitive* p = find_primitive(key)) return *p;
  auto fresh = std::make_unique<CachedPrimitive>();
  std::forward<Create>(create)(*fresh);
  return insert_primitive(key, std::move(fresh));
}

}  // namespace vitpe::cpu
