// CUDA patch merging gather (ops/cuda/patch_merge.cu) against timm's
// cat([x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]], -1) as index loops.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

TEST(CudaPatchMerge, MatchesTimmOrder) {
  VITPE_REQUIRE_CUDA();
  const int64_t B = 3, R = 6, C = 10, D = 7;
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = rounded(testing::random_tensor(Shape{B, R * C, D}, 1), t);
    Tensor y = poisoned(Shape{B, (R / 2) * (C / 2), 4 * D}, t);
    cuda::patch_merge_forward(y, upload(x, t), R, C);
    Tensor yh = download(y);
    const int64_t dr[4] = {0, 1, 0, 1}, dc[4] = {0, 0, 1, 1};  // x0, x1, x2, x3
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < R / 2; ++i)
        for (int64_t j = 0; j < C / 2; ++j)
          for (int part = 0; part < 4; ++part)
            for (int64_t d = 0; d < D; ++d) {
              const float want = x.at(((b * R + 2 * i + dr[part]) * C + 2 * j + dc[part]) * D + d);
              ASSERT_EQ(yh.at(((b * (R / 2) + i) * (C / 2) + j) * 4 * D + part * D + d), want);
            }
  }
}

TEST(CudaPatchMerge, RejectsOddGrid) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros(Shape{1, 15, 4}, DType::f32, Device::cuda);
  Tensor y = Tensor::zeros(Shape{1, 3, 16}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::patch_merge_forward(y, x, 3, 5), ShapeError);
}

}  // namespace
}  // namespace vitpe
