// Steady state allocates nothing: after a first round of linear (+GELU, +residual; f32 and int8;
// under FixedWorkSplit too) and patch embedding calls, repeating them allocates no Tensor storage
// and makes no heap allocation from vitpe code.
//
// This file replaces the global operator new/delete of the test_ops executable with counting
// versions (plain malloc/free underneath, so every other test is unaffected). While a round is
// measured, each allocation is attributed to the module of its caller (dladdr): oneDNN 2.6
// itself allocates a few small objects per primitive execution inside libdnnl (the argument
// map it builds in dnnl_primitive_execute and the std::function of its parallel loop), which
// no caller can avoid; those are counted separately and must stay constant from round to round.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ops/cpu/dnnl_cache.h"
#include "ops/ops.h"
#include "tests/testing.h"

namespace {

std::atomic<int64_t> g_news{0};
std::atomic<bool> g_armed{false};
std::atomic<int64_t> g_in_dnnl{0};
std::atomic<int64_t> g_elsewhere{0};
constexpr int kMaxCallers = 16;
void* g_callers[kMaxCallers];
std::atomic<int> g_ncallers{0};

bool in_onednn(void* addr) {
  Dl_info info;
  if (dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "libdnnl") != nullptr;
}

void* counted_alloc(size_t n, void* caller) {
  ++g_news;
  if (g_armed.load(std::memory_order_relaxed)) {
    if (in_onednn(caller)) {
      ++g_in_dnnl;
    } else {
      ++g_elsewhere;
      int i = g_ncallers.fetch_add(1);
      if (i < kMaxCallers) g_callers[i] = caller;
    }
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(size_t n) { return counted_alloc(n, __builtin_return_address(0)); }
void* operator new[](size_t n) { return counted_alloc(n, __builtin_return_address(0)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace vitpe {
namespace {

struct Counts {
  int64_t storage, elsewhere, in_dnnl, cache;
};

// The ops of a ViT-S/16 block and patch embedding at a reduced width, enough to exercise every
// cached primitive kind (plain, bias, GELU, binary residual, in-place residual, backward).
class SteadyState {
 public:
  SteadyState() {
    using testing::random_tensor;
    x = random_tensor(Shape{2, 17, 32}, 1);
    w1 = random_tensor(Shape{96, 32}, 2, 0.1);
    b1 = random_tensor(Shape{96}, 3);
    w2 = random_tensor(Shape{32, 96}, 4, 0.1);
    b2 = random_tensor(Shape{32}, 5);
    h = Tensor::empty(Shape{2, 17, 96});
    y = Tensor::empty(Shape{2, 17, 32});
    y2 = Tensor::empty(Shape{2, 17, 32});
    dx = Tensor::zeros(x.shape());
    dw1 = Tensor::zeros(w1.shape());
    db1 = Tensor::zeros(b1.shape());
    img = random_tensor(Shape{2, 3, 16, 24}, 6);
    pw = random_tensor(Shape{32, 3, 8, 8}, 7, 0.05);
    pb = random_tensor(Shape{32}, 8);
    tokens = Tensor::empty(Shape{2, 6, 32});
    dimg = Tensor::zeros(img.shape());
    dpw = Tensor::zeros(pw.shape());
    dpb = Tensor::zeros(pb.shape());
    a = random_tensor(Shape{4, 17, 8}, 9);
    s = Tensor::empty(Shape{4, 17, 17});
    // Enough rows for the int8 op's parallel tiles: 600 (the last tile of 128 rows has 88) and
    // 300 (tiles of all rows and 64 columns).
    xb = random_tensor(Shape{2, 300, 32}, 10);
    hb = Tensor::empty(Shape{2, 300, 96});
    xm = random_tensor(Shape{300, 32}, 11);
    hm = Tensor::empty(Shape{300, 96});
    // Training's fused fc1 + GELU: 12 blocks of 256 rows, the last of 184.
    xg = random_tensor(Shape{3000, 32}, 12);
    hg = Tensor::empty(Shape{3000, 96});
    dg = Tensor::empty(Shape{3000, 96});
    w2t = random_tensor(Shape{96, 96}, 13, 0.1);
    dhg = Tensor::empty(Shape{3000, 96});
    dxg = Tensor::empty(xg.shape());
    q1 = quantize_weights_int8(w1);
    q2 = quantize_weights_int8(w2);
  }

  void round() {
    linear_forward(h, x, w1, b1, Act::gelu);                  // fc1 + GELU
    linear_forward(y, h, w2, b2, Act::none, x);               // fc2 + residual
    linear_forward(y2, x, w1.slice(0, 32), Tensor());         // a view as weights, no bias
    linear_forward(y, x, w1.slice(0, 32), b2, Act::none, y);  // in-place residual
    linear_forward(h, x, w1, Tensor());                       // no bias
    linear_int8_forward(h, x, q1, b1, Act::gelu);             // int8 fc1 + GELU
    linear_int8_forward(y, h, q2, b2, Act::none, x);          // int8 fc2 + residual
    linear_int8_forward(y, h, q2, Tensor(), Act::none, y);    // int8, in-place residual
    linear_int8_forward(hb, xb, q1, b1, Act::gelu);           // int8 in tiles of 128 rows
    linear_int8_forward(hm, xm, q1, b1, Act::gelu);           // int8 in tiles of 64 columns
    linear_gelu_forward_with_derivative(hg, dg, xg, w1, b1);  // training's fc1: 12 row blocks
    linear_gelu_backward_data(dhg, hg, w2t, dg, db1);         // its backward through fc2
    linear_backward(dx, dw1, db1, h, x, w1);
    Tensor none;
    linear_backward(dx, none, none, h, x, w1);
    patch_embed_forward(tokens, img, pw, pb);
    patch_embed_backward(dimg, dpw, dpb, tokens, img, pw);
    {
      // Training's split: 12 blocks of 250 rows; dw in 2 tiles x 12 chunks (threads take them
      // in any order, each having made every shape's primitive in the first round).
      const FixedWorkSplit fixed;
      linear_forward(hg, xg, w1, b1, Act::gelu);
      linear_forward(hg, xg, w1, Tensor(), Act::none, hg);
      linear_backward(dxg, dw1, db1, hg, xg, w1, GradWrite::overwrite);
      linear_backward(dxg, dw1, db1, hg, xg, w1);
      patch_embed_forward(tokens, img, pw, pb);
      patch_embed_backward(dimg, dpw, dpb, tokens, img, pw);
    }
    cpu::matmul({.batch = 4, .m = 17, .n = 17, .k = 8, .trans_b = true, .alpha = 0.3f}, a.f32(),
                a.f32(), s.f32());
  }

  Tensor x, w1, b1, w2, b2, h, y, y2, dx, dw1, db1, img, pw, pb, tokens, dimg, dpw, dpb, a, s;
  Tensor xb, hb, xm, hm, xg, hg, dg, w2t, dhg, dxg;
  Int8Weights q1, q2;
};

Counts measure(SteadyState& st) {
  g_in_dnnl = 0;
  g_elsewhere = 0;
  g_ncallers = 0;
  const int64_t storage0 = storage_allocation_count();
  const int64_t cache0 = cpu::primitive_cache_size();
  g_armed = true;
  st.round();
  g_armed = false;
  return {storage_allocation_count() - storage0, g_elsewhere.load(), g_in_dnnl.load(),
          cpu::primitive_cache_size() - cache0};
}

TEST(Allocations, CountingOperatorNewIsInstalled) {
  const int64_t before = g_news.load();
  int* p = new int(3);
  EXPECT_EQ(g_news.load(), before + 1);
  delete p;
}

TEST(Allocations, RepeatedRoundsAllocateNothingOfOurs) {
  SteadyState st;
  st.round();  // first round: primitives, scratch buffers, oneDNN's lazy state
  // Each round's callers are named before the next round's measure() clears them.
  auto name_callers = [](const char* round) {
    const int ncallers = std::min(g_ncallers.load(), kMaxCallers);
    for (int i = 0; i < ncallers; ++i) {
      Dl_info info{};
      dladdr(g_callers[i], &info);
      ADD_FAILURE() << round << " round: allocation from "
                    << (info.dli_fname ? info.dli_fname : "?") << " "
                    << (info.dli_sname ? info.dli_sname : "?");
    }
  };
  // The int8 tiles go to whichever thread is free, so a thread may run its first oneDNN
  // primitive only in a later round (under load, often): that must allocate nothing either.
  const Counts second = measure(st);
  name_callers("second");
  EXPECT_EQ(second.storage, 0) << "Tensor storage allocated in a repeated round";
  EXPECT_EQ(second.cache, 0) << "a repeated round built new primitives";
  EXPECT_EQ(second.elsewhere, 0) << "heap allocations outside oneDNN in a repeated round";
  const Counts third = measure(st);
  name_callers("third");
  EXPECT_EQ(third.storage, 0);
  EXPECT_EQ(third.elsewhere, 0);
  // oneDNN's own per-execution allocations do not grow.
  EXPECT_EQ(third.in_dnnl, second.in_dnnl);
  RecordProperty("onednn_internal_allocations_per_round", static_cast<int>(third.in_dnnl));
  std::printf("oneDNN-internal operator new calls per round: %lld\n",
              static_cast<long long>(third.in_dnnl));
}

}  // namespace
}  // namespace vitpe
