// cuBLASLt, loaded on the first GPU matmul instead of with libvitpe.
//
// The library is some 540 MB; linked, the loader maps and relocates it in every process that
// loads libvitpe, whether it uses a GPU or not: about 210 MiB of resident memory and 60-100 ms
// of start-up for a CPU-only `vitpe classify`. Loaded here, a CPU process never touches it.
#pragma once

#include <cublasLt.h>

#include <string>

namespace vitpe::cuda {

// The cuBLASLt entry points the GPU linear layer calls.
struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtGetVersion) get_version;
  std::string path;  // the file it was loaded from
};

// The library's entry points, loaded on the first call (thread-safe; never unloaded). Tries
// libcublasLt.so.<the major version vitpe was built with> on the loader's search path (which
// includes libvitpe's run path), then in the toolkit's library folder of the build. Throws
// std::runtime_error naming what was tried and why it failed: no such file, a missing entry
// point, or a library of another major version than the headers vitpe was built with.
const CublasLt& cublaslt();

}  // namespace vitpe::cuda
