// A thread pool for the CPU ops: parallel_for over [0, n) in chunks that threads claim one at a
// time. Not used by the ops yet: moving their loops and the linear layers onto it is the next
// step for a shared machine (blocked linears are still slower than oneDNN's own threads on a
// quiet machine).
//
// Why not OpenMP's `parallel for`: a static split gives each thread a fixed share, and the
// region's end barrier waits for the slowest one. On a shared machine one of our threads shares
// its core with another process and is descheduled for whole scheduler slices (milliseconds)
// at a time, so every one of a forward's ~100 regions waited for it: ViT-S/16 batch 1 on 2
// threads went from 54 ms to 113-129 ms beside one busy process, slower than 1 thread. Here
// the calling thread takes part and chunks are claimed through one atomic word, so a worker
// that is descheduled (or has not woken yet) delays only the chunk it actually claimed; the
// others, the caller included, take the rest. The caller returns when every chunk is done.
//
// Workers spin briefly after a job (back-to-back regions on a quiet machine pay no wake-up),
// then sleep on a condition variable; a caller waiting for claimed chunks spins briefly too,
// then sleeps, so a descheduled worker can have its core.
//
// Rules:
// - fn(begin, end) gets item ranges that cover [0, n) exactly once, each at least `grain` long
//   (but the last); it must accept any such range: a nested call (fn calling parallel_for), a
//   pool already busy with another thread's job, 1 thread or a single chunk run fn(0, n) inline.
// - The number of threads is the calling thread's num_threads() (ops/ops.h): the pool grows to
//   it on first use and then allocates nothing.
// - Inside fn, OpenMP's thread count of the executing thread is 1, so oneDNN (built on OpenMP
//   in Debian) runs single-threaded within a chunk: split big products into chunks instead.
//   pool_thread_index() tells which participant runs a chunk (0 = the caller).
// - The first exception thrown by fn is rethrown in the caller once every claimed chunk has
//   finished; chunks not yet started are skipped.
#pragma once

#include <cstdint>
#include <type_traits>

namespace vitpe {

using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);

// The type-erased entry point; parallel_for below is what ops call.
void parallel_for_fn(int64_t n, int64_t grain, RangeFn fn, void* ctx);

// Runs fn(begin, end) over chunks of [0, n) of at least `grain` items (see the rules above).
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  using Fn = std::remove_reference_t<F>;
  parallel_for_fn(
      n, grain, [](void* ctx, int64_t begin, int64_t end) { (*static_cast<Fn*>(ctx))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// The participant running the current chunk: 0 for the calling thread (and outside the pool),
// 1..threads-1 for the workers. Lets a chunk use per-participant state without locks.
int pool_thread_index();

// Workers the pool has started so far (tests check that it stops growing).
int pool_workers();

}  // namespace vitpe
