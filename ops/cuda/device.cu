// Device queries and synchronisation for the CUDA backend.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

void synchronize() {
  require_cuda("cuda::synchronize");
  CUDA_CHECK(cudaDeviceSynchronize());
}

int compute_capability() {
  require_cuda("cuda::compute_capability");
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

std::string device_summary() {
  require_cuda("cuda::device_summary");
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.0f GiB", static_cast<double>(p.totalGlobalMem) / (1 << 30));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + mem + ")";
}

}  // namespace vitpe::cuda
