// oneDNN engine/stream, the primitive cache, the batched matmul helper and scratch buffers
// (see dnnl_cache.h for the contract).
#include "ops/cpu/dnnl_cache.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace vitpe::cpu {

// ---- engine and stream ------------------------------------------------------------------------

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  // One stream per calling thread: oneDNN does not promise that a stream may be used by
  // several threads at once, and ops may be called from several threads.
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

// ---- keys -------------------------------------------------------------------------------------

namespace {
thread_local int t_compute_stream = 0;
}  // namespace

int64_t primitive_threads() { return omp_get_max_threads(); }
int64_t primitive_thread_slot() { return omp_in_parallel() ? omp_get_thread_num() : -1; }

PrimitiveKey& PrimitiveKey::add(int64_t v) {
  if (count >= kMaxValues) {
    throw std::logic_error("PrimitiveKey: more than " + std::to_string(kMaxValues) +
                           " values for op kind " + std::to_string(kind));
  }
  values[count++] = v;
  return *this;
}

PrimitiveKey& PrimitiveKey::add_float(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return add(bits);
}

bool PrimitiveKey::operator==(const PrimitiveKey& o) const {
  if (kind != o.kind || count != o.count) return false;
  for (int i = 0; i < count; ++i)
    if (values[i] != o.values[i]) return false;
  return true;
}

size_t PrimitiveKey::hash() const {
  // FNV-1a over the used words: cheap and allocation-free.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(kind);
  mix(static_cast<uint64_t>(count));
  for (int i = 0; i < count; ++i) mix(static_cast<uint64_t>(values[i]));
  return static_cast<size_t>(h);
}

// ---- cached primitives ------------------------------------------------------------------------

void CachedPrimitive::init(dnnl::primitive prim, const dnnl::memory::desc& scratchpad_desc) {
  prim_ = std::move(prim);
  const char* info = nullptr;
  if (dnnl_primitive_desc_query(prim_.get_primitive_desc(), dnnl_query_impl_info_str, 0, &info) ==
          dnnl_success &&
      info) {
    impl_ = info;
  }
  if (scratchpad_desc.get_size() > 0) {
    // The library allocates and owns this buffer once; every run reuses it.
    scratchpad_ = dnnl::memory(scratchpad_desc, dnnl_engine());
  }
  // Slot 0 of args_ is reserved for the scratchpad; run() skips it when there is none.
  args_[0] = {DNNL_ARG_SCRATCHPAD, scratchpad_ ? scratchpad_.get() : nullptr};
}

void CachedPrimitive::bind(int arg, const dnnl::memory::desc& md) {
  if (nargs_ >= kMaxArgs) throw std::logic_error("CachedPrimitive: too many arguments");
  // DNNL_MEMORY_NONE: no buffer now; run() supplies the pointer.
  mems_[nargs_] = dnnl::memory(md, dnnl_engine(), DNNL_MEMORY_NONE);
  args_[1 + nargs_] = {arg, mems_[nargs_].get()};
  ++nargs_;
}

namespace {
std::atomic<bool> g_recording{false};
std::mutex g_record_mu;
std::vector<std::string> g_recorded;  // guarded by g_record_mu
}  // namespace

void start_kernel_record() {
  std::lock_guard<std::mutex> lock(g_record_mu);
  g_recorded.clear();
  g_recording.store(true);
}

std::vector<std::string> recorded_kernels() {
  std::lock_guard<std::mutex> lock(g_record_mu);
  g_recording.store(false);
  return g_recorded;
}

void CachedPrimitive::run(const void* const* ptrs, size_t count) {
  if (g_recording.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_record_mu);
    if (std::find(g_recorded.begin(), g_recorded.end(), impl_) == g_recorded.end())
      g_recorded.push_back(impl_);
  }
  if (static_cast<int>(count) != nargs_) {
    throw std::logic_error("CachedPrimitive::run: expected " + std::to_string(nargs_) +
                           " pointers, found " + std::to_string(count));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < count; ++i) {
    // The C call avoids the C++ wrapper's per-call checks; CPU handles are plain pointers.
    dnnl_memory_set_data_handle_v2(mems_[i].get(), const_cast<void*>(ptrs[i]), nullptr);
  }
  const int first = scratchpad_ ? 0 : 1;
  // dnnl::primitive::execute builds a std::vector of arguments per call; the C entry point
  // takes our fixed array.
  dnnl_status_t st =
      dnnl_primitive_execute(prim_.get(), dnnl_stream().get(), nargs_ + 1 - first, args_ + first);
  if (st != dnnl_success) {
    throw std::runtime_error("oneDNN: primitive execution failed with status " +
                             std::to_string(static_cast<int>(st)));
  }
}

namespace {

struct KeyHash {
  size_t operator()(const PrimitiveKey& k) const { return k.hash(); }
};

struct Cache {
  std::shared_mutex mu;
  std::unordered_map<PrimitiveKey, std::unique_ptr<CachedPrimitive>, KeyHash> map;
};

Cache& cache() {
  static Cache c;
  return c;
}

}  // namespace

CachedPrimitive* find_primitive(const PrimitiveKey& key) {
  Cache& c = cache();
  std::shared_lock<std::shared_mutex> lock(c.mu);
  auto it = c.map.find(key);
  return it == c.map.end() ? nullptr : it->second.get();
}

CachedPrimitive& insert_primitive(const PrimitiveKey& key, std::unique_ptr<CachedPrimitive> p) {
  Cache& c = cache();
  std::unique_lock<std::shared_mutex> lock(c.mu);
  auto [it, inserted] = c.map.emplace(key, std::move(p));
  return *it->second;
}

int64_t primitive_cache_size() {
  Cache& c = cache();
  std::shared_lock<std::shared_mutex> lock(c.mu);
  return static_cast<int64_t>(c.map.size());
}

// ---- batched matmul ---------------------------------------------------------------------------

void matmul(const MatmulSpec& s, const float* a, const float* b, float* c) {
  using dt = dnnl::memory::data_type;
  if (s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0) {
    if (s.batch > 0 && s.m > 0 && s.n > 0 && !s.accumulate && s.k == 0) {
      // An empty reduction: C = 0.
      int64_t ldc = s.ldc ? s.ldc : s.n;
      int64_t sc = s.stride_c >= 0 ? s.stride_c : s.m * ldc;
      for (int64_t bi = 0; bi < s.batch; ++bi)
        for (int64_t i = 0; i < s.m; ++i) std::memset(c + bi * sc + i * ldc, 0, s.n * 4);
    }
    if (s.batch < 0 || s.m < 0 || s.n < 0 || s.k < 0) {
      throw std::invalid_argument("cpu::matmul: negative size in batch " + std::to_string(s.batch) +
                                  ", m " + std::to_string(s.m) + ", n " + std::to_string(s.n) +
                                  ", k " + std::to_string(s.k));
    }
    return;
  }
  // Stored row lengths and defaults.
  const int64_t a_cols = s.trans_a ? s.m : s.k, a_rows = s.trans_a ? s.k : s.m;
  const int64_t b_cols = s.trans_b ? s.k : s.n, b_rows = s.trans_b ? s.n : s.k;
  const int64_t lda = s.lda ? s.lda : a_cols;
  const int64_t ldb = s.ldb ? s.ldb : b_cols;
  const int64_t ldc = s.ldc ? s.ldc : s.n;
  if (lda < a_cols || ldb < b_cols || ldc < s.n) {
    throw std::invalid_argument("cpu::matmul: leading strides too small: lda " +
                                std::to_string(lda) + " (row of " + std::to_string(a_cols) +
                                "), ldb " + std::to_string(ldb) + " (row of " +
                                std::to_string(b_cols) + "), ldc " + std::to_string(ldc) +
                                " (row of " + std::to_string(s.n) + ")");
  }
  const int64_t sa = s.stride_a >= 0 ? s.stride_a : a_rows * lda;
  const int64_t sb = s.stride_b >= 0 ? s.stride_b : b_rows * ldb;
  const int64_t sc = s.stride_c >= 0 ? s.stride_c : s.m * ldc;
  if (sc == 0 && s.batch > 1) {
    throw std::invalid_argument(
        "cpu::matmul: stride_c = 0 would write every batch entry to "
        "the same matrix");
  }

  PrimitiveKey key(OpKind::matmul);
  key.add(s.batch).add(s.m).add(s.n).add(s.k);
  key.add(s.trans_a).add(s.trans_b).add(lda).add(ldb).add(ldc);
  key.add(sa).add(sb).add(sc).add_float(s.alpha).add(s.accumulate);

  CachedPrimitive& p = cached_primitive(key, [&](CachedPrimitive& e) {
    // A memory descriptor with explicit strides expresses transposes, padded rows and
    // broadcasting (batch dimension 1) without copies.
    const int64_t ba = sa == 0 ? 1 : s.batch, bb = sb == 0 ? 1 : s.batch;
    dnnl::memory::desc a_md({ba, s.m, s.k}, dt::f32,
                            s.trans_a ? dnnl::memory::dims{sa ? sa : 1, 1, lda}
                                      : dnnl::memory::dims{sa ? sa : 1, lda, 1});
    dnnl::memory::desc b_md({bb, s.k, s.n}, dt::f32,
                            s.trans_b ? dnnl::memory::dims{sb ? sb : 1, 1, ldb}
                                      : dnnl::memory::dims{sb ? sb : 1, ldb, 1});
    dnnl::memory::desc c_md({s.batch, s.m, s.n}, dt::f32, dnnl::memory::dims{sc ? sc : 1, ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
    if (s.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(d, attr, dnnl_engine());
    } catch (const dnnl::error& err) {
      throw std::runtime_error("cpu::matmul: oneDNN has no f32 matmul for batch " +
                               std::to_string(s.batch) + ", M=" + std::to_string(s.m) +
                               ", N=" + std::to_string(s.n) + ", K=" + std::to_string(s.k) +
                               " with these strides: " + err.what());
    }
    e.init(dnnl::matmul(pd), pd.scratchpad_desc());
    e.bind(DNNL_ARG_SRC, a_md);
    e.bind(DNNL_ARG_WEIGHTS, b_md);
    e.bind(DNNL_ARG_DST, c_md);
  });
  p.run({a, b, c});
}

// ---- scratch buffers --------------------------------------------------------------------------

namespace {

struct ScratchBuffers {
  void* ptr[static_cast<int>(ScratchSlot::count)] = {};
  size_t size[static_cast<int>(ScratchSlot::count)] = {};
  ~ScratchBuffers() {
    for (void* p : ptr) std::free(p);
  }
};

thread_local ScratchBuffers t_scratch;

}  // namespace

void* scratch(ScratchSlot slot, size_t bytes) {
  int i = static_cast<int>(slot);
  if (i < 0 || i >= static_cast<int>(ScratchSlot::count)) {
    throw std::logic_error("cpu::scratch: invalid slot " + std::to_string(i));
  }
  if (bytes > t_scratch.size[i] || !t_scratch.ptr[i]) {
    std::free(t_scratch.ptr[i]);
    t_scratch.ptr[i] = nullptr;
    t_scratch.size[i] = 0;
    size_t padded = (bytes + 63) / 64 * 64;
    if (padded == 0) padded = 64;
    void* p = std::aligned_alloc(64, padded);
    if (!p) throw std::bad_alloc();
    t_scratch.ptr[i] = p;
    t_scratch.size[i] = padded;
  }
  return t_scratch.ptr[i];
}

}  // namespace vitpe::cpu

namespace vitpe {

// ---- CPU capabilities (declared in ops/ops.h) --------------------------------------------------

bool cpu_has_bf16() {
  // Asking oneDNN for a small bf16 matmul is the ground truth: it has one on avx512_core
  // (emulated), avx512_core_bf16 and AMX, and none on AVX2.
  static const bool has = [] {
    try {
      using dt = dnnl::memory::data_type;
      dnnl::memory::desc a({4, 32}, dt::bf16, dnnl::memory::format_tag::ab);
      dnnl::memory::desc b({32, 16}, dt::bf16, dnnl::memory::format_tag::ab);
      dnnl::memory::desc c({4, 16}, dt::f32, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), cpu::dnnl_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

const char* cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

}  // namespace vitpe

namespace vitpe {
void set_compute_stream(int stream) { cpu::t_compute_stream = stream; }
int compute_stream() { return cpu::t_compute_stream; }
}  // namespace vitpe
