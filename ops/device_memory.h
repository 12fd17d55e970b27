// Raw device memory used by Tensor. With CUDA these wrap cudaMalloc/cudaMemcpy (checked);
// in a build without CUDA they throw an error that says so.
#pragma once

#include <cstddef>

namespace vitpe {

enum class CopyKind { host_to_device, device_to_host, device_to_device };

bool cuda_available();  // built with CUDA and at least one device is present
void* cuda_alloc(size_t bytes);
void cuda_free(void* p) noexcept;
void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind);
void cuda_zero(void* p, size_t bytes);

}  // namespace vitpe
