// Error checking for every CUDA runtime, cuBLAS(Lt) call and kernel launch in ops/cuda/.
// Failures throw std::runtime_error naming the call, the file:line and the CUDA error string,
// so a broken launch is reported where it happens, not at the next synchronising call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace vitpe::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file,
                                          int line) {
  throw std::runtime_error(std::string("CUDA error at ") + file + ":" + std::to_string(line) +
                           ": " + what + " -> " + cudaGetErrorName(e) + ": " +
                           cudaGetErrorString(e));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* what, const char* file,
                                            int line) {
  throw std::runtime_error(std::string("cuBLAS error at ") + file + ":" + std::to_string(line) +
                           ": " + what + " -> status " + std::to_string(static_cast<int>(s)));
}

}  // namespace vitpe::cuda

#define CUDA_CHECK(call)                                                           \
  do {                                                                             \
    cudaError_t vitpe_cuda_err_ = (call);                                          \
    if (vitpe_cuda_err_ != cudaSuccess)                                            \
      ::vitpe::cuda::throw_cuda_error(vitpe_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    cublasStatus_t vitpe_cublas_st_ = (call);                                         \
    if (vitpe_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::vitpe::cuda::throw_cublas_error(vitpe_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After every <<<...>>> launch: catches bad configurations (grid, shared memory) at once.
#define CUDA_CHECK_LAUNCH(name)                                                                \
  do {                                                                                         \
    cudaError_t vitpe_cuda_err_ = cudaGetLastError();                                          \
    if (vitpe_cuda_err_ != cudaSuccess)                                                        \
      ::vitpe::cuda::throw_cuda_error(vitpe_cuda_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
