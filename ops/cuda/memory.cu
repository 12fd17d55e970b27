// Device memory for Tensor (ops/device_memory.h) on the CUDA runtime. Every call is checked;
// all work goes to the legacy default stream, so host copies are ordered after the kernels
// that produced their data.
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/device_memory.h"

namespace vitpe {

bool cuda_available() {
  // Probed once: without a driver or a device cudaGetDeviceCount returns an error, which here
  // means "no CUDA" rather than a failure. The error is cleared so it does not leak into the
  // next checked call.
  static const bool available = [] {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return available;
}

namespace {
void require_device(const char* what) {
  if (!cuda_available()) {
    throw std::runtime_error(std::string(what) +
                             ": no CUDA device is available (cudaGetDeviceCount found none or "
                             "the NVIDIA driver is missing)");
  }
}
}  // namespace

void* cuda_alloc(size_t bytes) {
  require_device("cuda_alloc");
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cuda_alloc: cudaMalloc of " + std::to_string(bytes) +
                             " bytes failed: " + cudaGetErrorString(e));
  }
  return p;
}

void cuda_free(void* p) noexcept {
  // Errors are ignored: at process exit the runtime may already be unloading, and a
  // destructor must not throw.
  if (p) (void)cudaFree(p);
}

void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  require_device("cuda_copy");
  cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, k));
}

void cuda_zero(void* p, size_t bytes) {
  if (bytes == 0) return;
  require_device("cuda_zero");
  CUDA_CHECK(cudaMemset(p, 0, bytes));
}

}  // namespace vitpe
