// CUDA head layout (ops/cuda/heads.cu): split of qkv into q, k, v and the merge back, exact
// against index loops written from the layout in ops/ops.h.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

TEST(CudaHeads, SplitAndMergeAreExact) {
  VITPE_REQUIRE_CUDA();
  const int64_t B = 3, N = 11, H = 4, hd = 32;
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor qkv = rounded(testing::random_tensor(Shape{B, N, 3 * H * hd}, 1), t);
    const Shape hs{B, H, N, hd};
    Tensor q = poisoned(hs, t), k = poisoned(hs, t), v = poisoned(hs, t);
    cuda::split_heads_forward(q, k, v, upload(qkv, t), H);
    Tensor qh = download(q), kh = download(k), vh = download(v);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t d = 0; d < hd; ++d) {
            const int64_t o = ((b * H + h) * N + n) * hd + d;
            const int64_t src = (b * N + n) * 3 * H * hd + h * hd + d;
            ASSERT_EQ(qh.at(o), qkv.at(src));
            ASSERT_EQ(kh.at(o), qkv.at(src + H * hd));
            ASSERT_EQ(vh.at(o), qkv.at(src + 2 * H * hd));
          }
    Tensor y = poisoned(Shape{B, N, H * hd}, t);
    cuda::merge_heads_forward(y, k);
    Tensor yh = download(y);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < H * hd; ++c)
          ASSERT_EQ(yh.at((b * N + n) * H * hd + c), qkv.at((b * N + n) * 3 * H * hd + H * hd + c));
  }
}

TEST(CudaHeads, RejectsIndivisibleChannels) {
  VITPE_REQUIRE_CUDA();
  Tensor qkv = Tensor::zeros(Shape{1, 2, 30}, DType::f32, Device::cuda);
  Tensor q = Tensor::zeros(Shape{1, 4, 2, 2}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::split_heads_forward(q, q, q, qkv, 4), ShapeError);
}

}  // namespace
}  // namespace vitpe
