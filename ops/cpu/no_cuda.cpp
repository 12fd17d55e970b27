// Device memory entry points for a build without CUDA: every use says how to get CUDA.
#include <stdexcept>

#include "ops/device_memory.h"

namespace vitpe {

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "this vitpe was built without CUDA (configure with -DVITPE_CUDA=ON and the CUDA Toolkit)");
}
}  // namespace

bool cuda_available() { return false; }
void* cuda_alloc(size_t) { no_cuda(); }
void cuda_free(void*) noexcept {}
void cuda_copy(void*, const void*, size_t, CopyKind) { no_cuda(); }
void cuda_zero(void*, size_t) { no_cuda(); }

}  // namespace vitpe
