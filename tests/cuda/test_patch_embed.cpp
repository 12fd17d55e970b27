// CUDA patch embedding (ops/cuda/patch_embed.cu: im2col + GEMM) against ref::patch_embed on a
// non-square image, f32 and bf16; the workspace is reused across calls of different sizes.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

TEST(CudaPatchEmbed, MatchesReference) {
  VITPE_REQUIRE_CUDA();
  struct Case {
    int64_t B, C, H, W, p, D;
  };
  for (Case c : {Case{3, 3, 32, 48, 16, 64}, Case{1, 3, 16, 8, 4, 96}, Case{2, 3, 32, 48, 16, 64}})
    for (DType t : {DType::f32, DType::bf16}) {
      Tensor x = rounded(testing::random_tensor(Shape{c.B, c.C, c.H, c.W}, 1), t);
      Tensor w = rounded(testing::random_tensor(Shape{c.D, c.C, c.p, c.p}, 2, 0.1), t);
      Tensor b = rounded(testing::random_tensor(Shape{c.D}, 3), t);
      const Shape ys{c.B, (c.H / c.p) * (c.W / c.p), c.D};
      Tensor y = poisoned(ys, t);
      cuda::patch_embed_forward(y, upload(x, t), upload(w, t), upload(b, t));
      EXPECT_LT(rel_error(download(y), ref::patch_embed(x, w, b, c.p)), tol(t))
          << dtype_name(t) << " " << c.H << "x" << c.W << " p " << c.p;
    }
}

TEST(CudaPatchEmbed, RejectsImageNotMultipleOfPatch) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros(Shape{1, 3, 20, 16}, DType::f32, Device::cuda);
  Tensor w = Tensor::zeros(Shape{8, 3, 16, 16}, DType::f32, Device::cuda);
  Tensor y = Tensor::zeros(Shape{1, 1, 8}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::patch_embed_forward(y, x, w, {}), ShapeError);
}

}  // namespace
}  // namespace vitpe
