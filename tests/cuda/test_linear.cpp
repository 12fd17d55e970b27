// CUDA linear (ops/cuda/linear.cu, cuBLASLt) against ref::linear: bias epilogue, exact GELU,
// residual (fused as C, and in place), GELU + residual, odd sizes and unaligned rows; f32 must
// match to 1e-5 (so no TF32), bf16 to 1e-2.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

struct Sizes {
  int64_t B, T, K, N;
};

TEST(CudaLinear, MatchesReferenceForEveryEpilogue) {
  VITPE_REQUIRE_CUDA();
  for (Sizes z : {Sizes{3, 5, 96, 80}, Sizes{2, 50, 256, 384}, Sizes{1, 7, 33, 17}}) {
    const Shape xs{z.B, z.T, z.K}, ys{z.B, z.T, z.N};
    for (DType t : {DType::f32, DType::bf16}) {
      Tensor x = rounded(testing::random_tensor(xs, 1), t);
      Tensor w = rounded(testing::random_tensor(Shape{z.N, z.K}, 2, 0.1), t);
      Tensor b = rounded(testing::random_tensor(Shape{z.N}, 3), t);
      Tensor r = rounded(testing::random_tensor(ys, 4), t);
      Tensor xd = upload(x, t), wd = upload(w, t), bd = upload(b, t), rd = upload(r, t);
      for (int variant = 0; variant < 5; ++variant) {
        const bool bias = variant != 0, gelu = variant == 2 || variant == 4, res = variant >= 3;
        const Act act = gelu ? Act::gelu : Act::none;
        Tensor want = ref::linear(x, w, bias ? b : Tensor{}, act, res ? r : Tensor{});
        Tensor y = poisoned(ys, t);
        cuda::linear_forward(y, xd, wd, bias ? bd : Tensor{}, act, res ? rd : Tensor{});
        EXPECT_LT(rel_error(download(y), want), tol(t))
            << dtype_name(t) << " K " << z.K << " variant " << variant;
      }
      // In place: y is the residual (y += x w^T + b), the transformer's residual stream.
      Tensor stream = upload(r, t);
      cuda::linear_forward(stream, xd, wd, bd, Act::none, stream);
      EXPECT_LT(rel_error(download(stream), ref::linear(x, w, b, Act::none, r)), tol(t))
          << dtype_name(t) << " in place";
    }
  }
}

TEST(CudaLinear, RejectsMismatchedShapes) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros(Shape{4, 8}, DType::f32, Device::cuda);
  Tensor w = Tensor::zeros(Shape{6, 9}, DType::f32, Device::cuda);
  Tensor y = Tensor::zeros(Shape{4, 6}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::linear_forward(y, x, w, {}), ShapeError);
  Tensor wb = Tensor::zeros(Shape{6, 8}, DType::bf16, Device::cuda);
  EXPECT_THROW(cuda::linear_forward(y, x, wb, {}), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
