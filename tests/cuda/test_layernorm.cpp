// CUDA LayerNorm (ops/cuda/layernorm.cu) against ref::layernorm: f32 and bf16 activations, f32
// and bf16 parameters, rows with a large mean (the two-pass variance must not cancel), in place.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

TEST(CudaLayerNorm, MatchesReference) {
  VITPE_REQUIRE_CUDA();
  for (int64_t D : {96, 384, 768, 1000}) {
    const Shape s{3, 5, D};
    Tensor x0 = testing::random_tensor(s, D, 2.0);
    for (int64_t i = 0; i < x0.numel(); ++i) x0.at(i) += 5.f;  // offset mean
    Tensor g = testing::random_tensor(Shape{D}, D + 1), b = testing::random_tensor(Shape{D}, D + 2);
    for (DType t : {DType::f32, DType::bf16}) {
      Tensor x = rounded(x0, t);
      for (DType pt : {DType::f32, t}) {
        Tensor gr = rounded(g, pt), br = rounded(b, pt);
        Tensor want = ref::layernorm(x, gr, br, 1e-6f).y;
        Tensor y = poisoned(s, t);
        cuda::layernorm_forward(y, upload(x, t), upload(gr, pt), upload(br, pt), 1e-6f);
        EXPECT_LT(rel_error(download(y), want), tol(t))
            << "D " << D << " x " << dtype_name(t) << " params " << dtype_name(pt);
      }
      Tensor xi = upload(x, t);
      cuda::layernorm_forward(xi, xi, upload(g, DType::f32), upload(b, DType::f32), 1e-5f);
      EXPECT_LT(rel_error(download(xi), ref::layernorm(x, g, b, 1e-5f).y), tol(t)) << "in place";
    }
  }
}

TEST(CudaLayerNorm, RejectsWrongParameterShape) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros(Shape{2, 8}, DType::f32, Device::cuda);
  Tensor g = Tensor::zeros(Shape{7}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::layernorm_forward(x, x, g, g, 1e-6f), ShapeError);
}

}  // namespace
}  // namespace vitpe
