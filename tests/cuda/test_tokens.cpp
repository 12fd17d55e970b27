// CUDA token sequences (ops/cuda/tokens.cu) against loops over the CPU tensors: assembling prefix
// tokens, patches and a position table (all rows, patch rows only, none, in place), and selecting
// tokens.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

// y[b, n] = (n < P ? prefix[n] : x[b, n - P]) + table[n - skip] (n >= skip).
Tensor assemble_ref(const Tensor& prefix, const Tensor& x, const Tensor& table, int64_t P) {
  const int64_t B = x.size(0), Np = x.size(1), D = x.size(2), N = P + Np;
  const int64_t skip = table.defined() ? N - table.size(0) : 0;
  Tensor y = Tensor::zeros({B, N, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        float v = n < P ? prefix.at(n * D + d) : x.at((b * Np + n - P) * D + d);
        if (table.defined() && n >= skip) v += table.at((n - skip) * D + d);
        y.at((b * N + n) * D + d) = v;
      }
  return y;
}

TEST(CudaTokens, AssembleMatchesReference) {
  VITPE_REQUIRE_CUDA();
  const int64_t B = 3, Np = 12, D = 40;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t P : {0, 1, 5})
      for (int table_rows : {0, 1, 2}) {  // none, P + Np rows, Np rows (patches only)
        Tensor x = rounded(testing::random_tensor({B, Np, D}, 1), t);
        Tensor prefix = P ? testing::random_tensor({P, D}, 2) : Tensor();
        Tensor table;
        if (table_rows == 1) table = testing::random_tensor({P + Np, D}, 3);
        if (table_rows == 2) table = testing::random_tensor({Np, D}, 4);
        Tensor y = poisoned({B, P + Np, D}, t);
        cuda::assemble_tokens_forward(y, P ? prefix.to(Device::cuda) : Tensor(), upload(x, t),
                                      table.defined() ? table.to(Device::cuda) : Tensor());
        EXPECT_LT(rel_error(download(y), assemble_ref(prefix, x, table, P)), tol(t))
            << dtype_name(t) << " P " << P << " table " << table_rows;
      }
}

TEST(CudaTokens, AssembleInPlaceWithoutPrefix) {
  VITPE_REQUIRE_CUDA();
  Tensor x = testing::random_tensor({2, 9, 16}, 1);
  Tensor table = testing::random_tensor({9, 16}, 2);
  Tensor y = x.to(Device::cuda);
  cuda::assemble_tokens_forward(y, Tensor(), y, table.to(Device::cuda));
  EXPECT_LT(rel_error(download(y), assemble_ref(Tensor(), x, table, 0)), kTolF32);
}

TEST(CudaTokens, AssembleRejectsBadShapes) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros({2, 9, 16}, DType::f32, Device::cuda);
  Tensor prefix = Tensor::zeros({1, 16}, DType::f32, Device::cuda);
  Tensor y = Tensor::zeros({2, 10, 16}, DType::f32, Device::cuda);
  Tensor table = Tensor::zeros({7, 16}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::assemble_tokens_forward(y, prefix, x, table), ShapeError);
  Tensor y9 = Tensor::zeros({2, 9, 16}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::assemble_tokens_forward(y9, prefix, x, Tensor()), ShapeError);
}

TEST(CudaTokens, SelectMatchesReference) {
  VITPE_REQUIRE_CUDA();
  const int64_t B = 3, N = 7, D = 24;
  for (DType t : {DType::f32, DType::bf16})
    for (auto [start, count] : {std::pair<int64_t, int64_t>{0, 1}, {1, 1}, {2, 5}}) {
      Tensor x = rounded(testing::random_tensor({B, N, D}, 1), t);
      Tensor want = Tensor::zeros({B, count, D});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < count * D; ++i)
          want.at(b * count * D + i) = x.at((b * N + start) * D + i);
      Tensor y = poisoned({B, count, D}, t);
      cuda::select_tokens_forward(y, upload(x, t), start);
      EXPECT_EQ(rel_error(download(y), want), 0.0) << dtype_name(t) << " start " << start;
    }
  Tensor x = Tensor::zeros({B, N, D}, DType::f32, Device::cuda);
  Tensor y = Tensor::zeros({B, 2, D}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::select_tokens_forward(y, x, 6), ShapeError);
}

}  // namespace
}  // namespace vitpe
