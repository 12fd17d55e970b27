// ops/cpu/dnnl_cache: the batched strided matmul against a naive loop (every transpose,
// padded strides, broadcasting, alpha, accumulation), cache reuse, keys and scratch buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/cpu/dnnl_cache.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using cpu::MatmulSpec;

// C[b] = alpha * op(A[b]) op(B[b]) (+ C[b]) in double, reading the same strided layout.
void naive_matmul(const MatmulSpec& s, const float* a, const float* b, float* c) {
  const int64_t lda = s.lda ? s.lda : (s.trans_a ? s.m : s.k);
  const int64_t ldb = s.ldb ? s.ldb : (s.trans_b ? s.k : s.n);
  const int64_t ldc = s.ldc ? s.ldc : s.n;
  const int64_t sa = s.stride_a >= 0 ? s.stride_a : (s.trans_a ? s.k : s.m) * lda;
  const int64_t sb = s.stride_b >= 0 ? s.stride_b : (s.trans_b ? s.n : s.k) * ldb;
  const int64_t sc = s.stride_c >= 0 ? s.stride_c : s.m * ldc;
  for (int64_t bi = 0; bi < s.batch; ++bi)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          float av = s.trans_a ? a[bi * sa + l * lda + i] : a[bi * sa + i * lda + l];
          float bv = s.trans_b ? b[bi * sb + j * ldb + l] : b[bi * sb + l * ldb + j];
          acc += static_cast<double>(av) * bv;
        }
        float& out = c[bi * sc + i * ldc + j];
        out = static_cast<float>(s.alpha * acc + (s.accumulate ? out : 0.0));
      }
}

// Runs spec on random buffers big enough for its strides; compares the whole C buffer, so
// writes outside the matrices (into padding) are caught too.
void check_matmul(const MatmulSpec& s, size_t a_size, size_t b_size, size_t c_size, uint64_t seed) {
  Tensor a = testing::random_tensor(Shape{static_cast<int64_t>(a_size)}, seed);
  Tensor b = testing::random_tensor(Shape{static_cast<int64_t>(b_size)}, seed + 1);
  Tensor c = testing::random_tensor(Shape{static_cast<int64_t>(c_size)}, seed + 2);
  Tensor want = c.clone();
  cpu::matmul(s, a.f32(), b.f32(), c.f32());
  naive_matmul(s, a.f32(), b.f32(), want.f32());
  EXPECT_LT(testing::max_rel_error(c, want), 1e-5)
      << "batch " << s.batch << " m " << s.m << " n " << s.n << " k " << s.k << " ta " << s.trans_a
      << " tb " << s.trans_b << " alpha " << s.alpha << " acc " << s.accumulate;
}

TEST(Matmul, AllTransposesTight) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        MatmulSpec s{.batch = 3, .m = 13, .n = 7, .k = 11, .trans_a = ta, .trans_b = tb};
        s.alpha = acc ? 0.5f : 1.0f;
        s.accumulate = acc;
        check_matmul(s, 3 * 13 * 11, 3 * 7 * 11, 3 * 13 * 7, 1 + ta * 2 + tb * 4 + acc * 8);
      }
}

TEST(Matmul, AttentionShapes) {
  // logits = scale * q k^T for q, k: [BH, N, hd]
  MatmulSpec s{.batch = 6, .m = 197, .n = 197, .k = 64, .trans_b = true, .alpha = 0.125f};
  check_matmul(s, 6 * 197 * 64, 6 * 197 * 64, 6 * 197 * 197, 20);
  // out = p v
  MatmulSpec pv{.batch = 6, .m = 197, .n = 64, .k = 197};
  check_matmul(pv, 6 * 197 * 197, 6 * 197 * 64, 6 * 197 * 64, 21);
  // dv += p^T dout
  MatmulSpec dv{.batch = 6, .m = 197, .n = 64, .k = 197, .trans_a = true, .accumulate = true};
  check_matmul(dv, 6 * 197 * 197, 6 * 197 * 64, 6 * 197 * 64, 22);
}

TEST(Matmul, LeadingAndBatchStrides) {
  // q, k read in place from qkv: [N, 3, H, hd] style rows (row stride 3*H*hd), heads as
  // batch entries hd apart; C rows padded.
  const int64_t n = 9, h = 2, hd = 4, row = 3 * h * hd;
  MatmulSpec s{.batch = h, .m = n, .n = n, .k = hd, .trans_b = true};
  s.lda = row;
  s.ldb = row;
  s.stride_a = hd;
  s.stride_b = hd;
  s.ldc = n + 3;
  s.stride_c = n * (n + 3) + 5;
  check_matmul(s, n * row, n * row, h * (n * (n + 3) + 5), 30);
}

TEST(Matmul, BroadcastsAMatrixWithBatchStrideZero) {
  MatmulSpec s{.batch = 4, .m = 5, .n = 6, .k = 7};
  s.stride_b = 0;  // one B for every batch entry
  check_matmul(s, 4 * 5 * 7, 7 * 6, 4 * 5 * 6, 40);
  MatmulSpec t{.batch = 4, .m = 5, .n = 6, .k = 7};
  t.stride_a = 0;
  check_matmul(t, 5 * 7, 4 * 7 * 6, 4 * 5 * 6, 41);
}

TEST(Matmul, RejectsBadStrides) {
  float x[16] = {};
  MatmulSpec s{.batch = 1, .m = 2, .n = 2, .k = 4, .lda = 3};
  EXPECT_THROW(cpu::matmul(s, x, x, x), std::invalid_argument);
  MatmulSpec t{.batch = 2, .m = 2, .n = 2, .k = 2};
  t.stride_c = 0;
  EXPECT_THROW(cpu::matmul(t, x, x, x), std::invalid_argument);
}

TEST(Matmul, SecondCallReusesTheCachedPrimitive) {
  MatmulSpec s{.batch = 2, .m = 3, .n = 4, .k = 5};
  std::vector<float> a(30, 1.0f), b(40, 2.0f), c(24);
  cpu::matmul(s, a.data(), b.data(), c.data());
  int64_t entries = cpu::primitive_cache_size();
  cpu::matmul(s, a.data(), b.data(), c.data());
  EXPECT_EQ(cpu::primitive_cache_size(), entries);
  EXPECT_EQ(c[0], 10.0f);
  s.alpha = 2.0f;  // a different post-op is a different primitive
  cpu::matmul(s, a.data(), b.data(), c.data());
  EXPECT_EQ(cpu::primitive_cache_size(), entries + 1);
  EXPECT_EQ(c[23], 20.0f);
}

TEST(PrimitiveKey, EqualityAndHashDependOnEveryValue) {
  cpu::PrimitiveKey a(cpu::OpKind::matmul), b(cpu::OpKind::matmul), c(cpu::OpKind::matmul, 1);
  a.add(1).add(2).add_float(0.5f);
  b.add(1).add(2).add_float(0.5f);
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.hash(), b.hash());
  c.add(1).add(2).add_float(0.5f);
  EXPECT_FALSE(a == c);  // another kind
  b.add(0);
  EXPECT_FALSE(a == b);  // one more value, even a zero
  cpu::PrimitiveKey full(cpu::OpKind::other);
  for (int i = 0; i < cpu::PrimitiveKey::kMaxValues; ++i) full.add(i);
  EXPECT_THROW(full.add(0), std::logic_error);
}

TEST(Scratch, GrowsAndKeepsItsBufferForSmallerRequests) {
  void* p = cpu::scratch(cpu::ScratchSlot::attention_3, 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(cpu::scratch(cpu::ScratchSlot::attention_3, 10), p);
  static_cast<char*>(cpu::scratch(cpu::ScratchSlot::attention_3, 1 << 20))[(1 << 20) - 1] = 1;
  EXPECT_NE(cpu::scratch(cpu::ScratchSlot::attention_2, 8), nullptr);
}

}  // namespace
}  // namespace vitpe
