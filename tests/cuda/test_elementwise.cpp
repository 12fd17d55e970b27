// Elementwise CUDA ops (ops/cuda/elementwise.cu): exact GELU against ref::gelu, add, and the
// f32 <-> bf16 conversion against the CPU's round-to-nearest-even, on random inputs with
// NaN-poisoned outputs.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

TEST(CudaElementwise, GeluMatchesReference) {
  VITPE_REQUIRE_CUDA();
  const Shape s{3, 7, 129};
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = rounded(testing::random_tensor(s, 1, 3.0), t);
    Tensor y = poisoned(s, t);
    cuda::gelu_forward(y, upload(x, t));
    EXPECT_LT(rel_error(download(y), ref::gelu(x)), tol(t)) << dtype_name(t);
    // in place
    Tensor xi = upload(x, t);
    cuda::gelu_forward(xi, xi);
    EXPECT_LT(rel_error(download(xi), ref::gelu(x)), tol(t)) << dtype_name(t) << " in place";
  }
}

TEST(CudaElementwise, AddMatchesReference) {
  VITPE_REQUIRE_CUDA();
  const Shape s{5, 33};
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor a = rounded(testing::random_tensor(s, 2), t),
           b = rounded(testing::random_tensor(s, 3), t);
    Tensor want = add_tensors(a, b);
    Tensor y = poisoned(s, t);
    cuda::add_forward(y, upload(a, t), upload(b, t));
    EXPECT_LT(rel_error(download(y), want), tol(t));
    Tensor ad = upload(a, t);
    cuda::add_forward(ad, ad, upload(b, t));  // y aliases a
    EXPECT_LT(rel_error(download(ad), want), tol(t));
  }
}

TEST(CudaElementwise, ConvertRoundsLikeTheCpu) {
  VITPE_REQUIRE_CUDA();
  Tensor x = testing::random_tensor(Shape{4097}, 4, 100.0);
  Tensor xd = x.to(Device::cuda);
  Tensor b = poisoned(x.shape(), DType::bf16);
  cuda::convert(b, xd);
  Tensor bh = b.to(Device::cpu), want = x.to(DType::bf16);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(bh.bf16()[i], want.bf16()[i]) << i;
  Tensor f = poisoned(x.shape(), DType::f32);
  cuda::convert(f, b);
  Tensor fh = f.to(Device::cpu), wantf = want.to(DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(fh.at(i), wantf.at(i)) << i;
}

TEST(CudaElementwise, RejectsMismatchedShapes) {
  VITPE_REQUIRE_CUDA();
  Tensor a = Tensor::zeros(Shape{4, 4}, DType::f32, Device::cuda);
  Tensor b = Tensor::zeros(Shape{4, 5}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::add_forward(a, a, b), ShapeError);
  Tensor c = Tensor::zeros(Shape{4, 4});
  EXPECT_THROW(cuda::gelu_forward(a, c), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
