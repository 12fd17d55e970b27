// parallel_for: every item of [0, n) runs exactly once whatever the sizes, grains and
// thread counts; nested calls, exceptions and a descheduled (here: sleeping) participant keep
// that; OpenMP's thread count inside a chunk is 1 and the caller's is restored.
// (That repeated calls allocate nothing is checked with the counting allocator in
// test_allocations.cpp.)
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ops/ops.h"
#include "ops/parallel.h"

namespace vitpe {
namespace {

// Restores the calling thread's compute threads at the end of a test.
class Threads {
 public:
  explicit Threads(int n) : before_(num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(before_); }

 private:
  int before_;
};

// Counts how often each item of [0, n) is visited and checks every range's length.
void expect_exact_cover(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<bool> short_range{false};
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    if (end - begin < grain && end != n) short_range = true;
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
        << "item " << i << " of n = " << n << ", grain " << grain << ", threads " << num_threads();
  }
  EXPECT_FALSE(short_range) << "a range shorter than the grain " << grain << " before the end";
}

TEST(Parallel, ChunksCoverTheRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    Threads t(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 65537, 300001}) {
      for (int64_t grain : {1, 3, 64, 5000}) expect_exact_cover(n, grain);
    }
  }
}

TEST(Parallel, ManyBackToBackJobsStayExact) {
  // Short jobs in a row: workers still finishing (or late to notice) one job must not claim
  // chunks of the next one under the old job's description.
  Threads t(3);
  std::vector<int64_t> sums(2000);
  for (size_t r = 0; r < sums.size(); ++r) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 17 + static_cast<int64_t>(r % 50);
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += i + static_cast<int64_t>(r);
    });
    sums[r] = sum.load();
    ASSERT_EQ(sums[r], n * (n - 1) / 2 + n * static_cast<int64_t>(r)) << "job " << r;
  }
}

TEST(Parallel, NestedCallsRunInline) {
  Threads t(2);
  std::vector<std::atomic<int>> hits(40 * 30);
  parallel_for(40, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int outer = pool_thread_index();
      parallel_for(30, 1, [&](int64_t b2, int64_t e2) {
        // The whole inner range on the same participant, in one call.
        EXPECT_EQ(b2, 0);
        EXPECT_EQ(e2, 30);
        EXPECT_EQ(pool_thread_index(), outer);
        for (int64_t j = b2; j < e2; ++j) hits[static_cast<size_t>(i * 30 + j)].fetch_add(1);
      });
    }
  });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(Parallel, FirstExceptionReachesTheCaller) {
  Threads t(2);
  std::atomic<int> ran{0};
  try {
    parallel_for(1000, 1, [&](int64_t begin, int64_t) {
      ++ran;
      if (begin == 500) throw std::runtime_error("chunk 500 failed");
    });
    FAIL() << "the exception did not reach the caller";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk 500 failed");
  }
  EXPECT_LE(ran.load(), 1000);
  // The pool is usable again and OpenMP's count is restored.
  EXPECT_EQ(num_threads(), 2);
  expect_exact_cover(1000, 1);
}

TEST(Parallel, AStalledParticipantDelaysOnlyItsChunk) {
  // The participant of chunk 0 stalls, as one descheduled by the OS would: the others (the
  // caller, or a worker) take every other chunk meanwhile, and the result is still exact. A
  // static split would leave half the chunks to the stalled thread.
  Threads t(2);
  const int64_t n = 64;
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int64_t> others_done{0};
  int64_t others_done_while_stalled = -1;
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    if (begin == 0) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (others_done.load() < n - 1 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      others_done_while_stalled = others_done.load();
    }
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    if (begin != 0) others_done += end - begin;
  });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(others_done_while_stalled, n - 1);
}

TEST(Parallel, ChunksRunWithOneOpenMPThreadAndTheCallersCountIsRestored) {
  Threads t(2);
  std::atomic<int> max_seen{0};
  std::atomic<int> participants_seen{0};
  parallel_for(256, 1, [&](int64_t, int64_t) {
    max_seen = std::max(max_seen.load(), omp_get_max_threads());
    participants_seen |= 1 << pool_thread_index();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  });
  EXPECT_EQ(max_seen.load(), 1);
  EXPECT_EQ(num_threads(), 2);
  EXPECT_EQ(participants_seen.load() & ~3, 0) << "a participant index beyond the thread count";
  EXPECT_GE(pool_workers(), 1);
}

TEST(Parallel, ConcurrentCallersEachGetExactResults) {
  // Two application threads: one owns the pool, the other runs its loop inline.
  Threads t(2);
  std::atomic<bool> bad{false};
  auto body = [&] {
    set_num_threads(2);
    for (int r = 0; r < 200; ++r) {
      std::vector<int> hits(500);
      parallel_for(500, 7, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int h : hits)
        if (h != 1) bad = true;
    }
  };
  std::thread other(body);
  body();
  other.join();
  EXPECT_FALSE(bad.load());
}

}  // namespace
}  // namespace vitpe
