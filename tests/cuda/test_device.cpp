// Device queries (ops/cuda/device.cu): the summary names the device and its compute capability.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

TEST(CudaDevice, SummaryAndCapability) {
  VITPE_REQUIRE_CUDA();
  const int cc = cuda::compute_capability();
  EXPECT_GE(cc, 50);
  const std::string s = cuda::device_summary();
  EXPECT_NE(s.find("sm_" + std::to_string(cc)), std::string::npos) << s;
  EXPECT_NO_THROW(cuda::synchronize());
}

TEST(CudaDevice, QueriesWithoutADeviceThrow) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(cuda::device_summary(), std::runtime_error);
  EXPECT_THROW(cuda::synchronize(), std::runtime_error);
}

}  // namespace
}  // namespace vitpe
