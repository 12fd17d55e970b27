// Device memory (ops/cuda/memory.cu) through Tensor: upload/download round trips, zeroing and
// device-to-device copies preserve every byte; without a device the tests skip.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

TEST(CudaMemory, RoundTripF32AndBf16) {
  VITPE_REQUIRE_CUDA();
  Tensor x = testing::random_tensor(Shape{3, 5, 7}, 1);
  Tensor back = x.to(Device::cuda).to(Device::cpu);
  ASSERT_EQ(back.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(back.at(i), x.at(i)) << i;

  Tensor xb = x.to(DType::bf16);
  Tensor bb = xb.to(Device::cuda).to(Device::cpu);
  ASSERT_EQ(bb.dtype(), DType::bf16);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(bb.bf16()[i], xb.bf16()[i]) << i;
}

TEST(CudaMemory, ZeroAndDeviceCopy) {
  VITPE_REQUIRE_CUDA();
  Tensor x = testing::random_tensor(Shape{1000}, 2);
  Tensor d = x.to(Device::cuda);
  Tensor e = Tensor::empty(Shape{1000}, DType::f32, Device::cuda);
  e.copy_from(d);  // device to device
  Tensor clone = e.clone();
  d.zero();
  Tensor z = d.to(Device::cpu), c = clone.to(Device::cpu);
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(z.at(i), 0.f) << i;
    ASSERT_EQ(c.at(i), x.at(i)) << i;
  }
  // A slice of a device tensor copies just its rows.
  Tensor rows = x.reshape(Shape{10, 100}).to(Device::cuda).slice(3, 5).to(Device::cpu);
  for (int64_t i = 0; i < 200; ++i) ASSERT_EQ(rows.at(i), x.at(300 + i)) << i;
}

TEST(CudaMemory, AvailabilityIsConsistent) {
  // Runs everywhere: without a device, allocating says so instead of crashing.
  if (cuda_available()) {
    EXPECT_NO_THROW(Tensor::empty(Shape{16}, DType::f32, Device::cuda));
  } else {
    EXPECT_THROW(Tensor::empty(Shape{16}, DType::f32, Device::cuda), std::runtime_error);
  }
}

}  // namespace
}  // namespace vitpe
