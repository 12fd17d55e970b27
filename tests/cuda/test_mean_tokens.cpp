// CUDA mean over tokens (ops/cuda/mean_tokens.cu) against ref::mean_tokens, with and without
// skipping a class token.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

TEST(CudaMeanTokens, MatchesReference) {
  VITPE_REQUIRE_CUDA();
  const Shape s{3, 50, 96};
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t start : {0, 1}) {
      Tensor x = rounded(testing::random_tensor(s, 1 + start), t);
      for (int64_t i = 0; i < x.numel(); ++i) x.at(i) += 0.5f;  // a mean far from zero
      x = rounded(x, t);
      Tensor y = poisoned(Shape{3, 96}, t);
      cuda::mean_tokens_forward(y, upload(x, t), start);
      EXPECT_LT(rel_error(download(y), ref::mean_tokens(x, start)), tol(t))
          << dtype_name(t) << " start " << start;
    }
}

TEST(CudaMeanTokens, RejectsStartPastTheEnd) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros(Shape{2, 3, 4}, DType::f32, Device::cuda);
  Tensor y = Tensor::zeros(Shape{2, 4}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::mean_tokens_forward(y, x, 3), ShapeError);
}

}  // namespace
}  // namespace vitpe
