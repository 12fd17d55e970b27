// cuBLASLt is loaded on the first GPU matmul, not with libvitpe (ops/cuda/cublaslt.h). Loading
// needs no GPU, so these run on every CUDA build.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "ops/cuda/cublaslt.h"

namespace vitpe {
namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLt, LoadsTheBuildsMajorVersionOnFirstUse) {
  const cuda::CublasLt& lt = cuda::cublaslt();
  EXPECT_TRUE(mapped("libcublasLt.so")) << "loaded from " << lt.path;
  EXPECT_NE(lt.path.find("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)), std::string::npos)
      << lt.path;
  EXPECT_EQ(lt.get_version() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  for (const void* f : {reinterpret_cast<const void*>(lt.create),
                        reinterpret_cast<const void*>(lt.matmul_desc_create),
                        reinterpret_cast<const void*>(lt.matmul_desc_destroy),
                        reinterpret_cast<const void*>(lt.matmul_desc_set_attribute),
                        reinterpret_cast<const void*>(lt.matrix_layout_create),
                        reinterpret_cast<const void*>(lt.matrix_layout_destroy),
                        reinterpret_cast<const void*>(lt.preference_create),
                        reinterpret_cast<const void*>(lt.preference_destroy),
                        reinterpret_cast<const void*>(lt.preference_set_attribute),
                        reinterpret_cast<const void*>(lt.algo_get_heuristic),
                        reinterpret_cast<const void*>(lt.matmul)})
    EXPECT_NE(f, nullptr);
  EXPECT_EQ(&cuda::cublaslt(), &lt) << "loaded once";
}

}  // namespace
}  // namespace vitpe
