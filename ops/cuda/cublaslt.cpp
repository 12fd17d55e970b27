// cuBLASLt loaded on first use (declared in ops/cuda/cublaslt.h).
#include "ops/cuda/cublaslt.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <vector>

namespace vitpe::cuda {

namespace {

#define VITPE_STR2(x) #x
#define VITPE_STR(x) VITPE_STR2(x)
// libcublasLt.so.13 for the headers of CUDA 13.
constexpr const char* kSoname = "libcublasLt.so." VITPE_STR(CUBLAS_VER_MAJOR);

template <class F>
void resolve(F& f, void* lib, const char* name, const std::string& path) {
  dlerror();
  void* p = dlsym(lib, name);
  if (!p) {
    const char* e = dlerror();
    throw std::runtime_error("cuBLASLt: " + path + " has no " + name +
                             (e ? std::string(": ") + e : "") +
                             "; vitpe needs the cuBLASLt of CUDA " VITPE_STR(CUBLAS_VER_MAJOR));
  }
  f = reinterpret_cast<F>(p);
}

CublasLt load() {
  std::vector<std::string> tried = {kSoname};
#ifdef VITPE_CUDA_LIBRARY_DIR
  tried.push_back(std::string(VITPE_CUDA_LIBRARY_DIR) + "/" + kSoname);
#endif
  std::string errors;
  void* lib = nullptr;
  std::string path;
  for (const std::string& p : tried) {
    lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      path = p;
      break;
    }
    const char* e = dlerror();
    errors += "\n  " + p + ": " + (e ? e : "not loadable");
  }
  if (!lib) {
    throw std::runtime_error(
        "the CUDA backend needs cuBLASLt (" + std::string(kSoname) +
        ", CUDA " VITPE_STR(CUBLAS_VER_MAJOR) "'s toolkit or its libcublas package), tried:" +
        errors);
  }
  CublasLt lt;
  lt.path = path;
  resolve(lt.create, lib, "cublasLtCreate", path);
  resolve(lt.matmul_desc_create, lib, "cublasLtMatmulDescCreate", path);
  resolve(lt.matmul_desc_destroy, lib, "cublasLtMatmulDescDestroy", path);
  resolve(lt.matmul_desc_set_attribute, lib, "cublasLtMatmulDescSetAttribute", path);
  resolve(lt.matrix_layout_create, lib, "cublasLtMatrixLayoutCreate", path);
  resolve(lt.matrix_layout_destroy, lib, "cublasLtMatrixLayoutDestroy", path);
  resolve(lt.preference_create, lib, "cublasLtMatmulPreferenceCreate", path);
  resolve(lt.preference_destroy, lib, "cublasLtMatmulPreferenceDestroy", path);
  resolve(lt.preference_set_attribute, lib, "cublasLtMatmulPreferenceSetAttribute", path);
  resolve(lt.algo_get_heuristic, lib, "cublasLtMatmulAlgoGetHeuristic", path);
  resolve(lt.matmul, lib, "cublasLtMatmul", path);
  resolve(lt.get_version, lib, "cublasLtGetVersion", path);
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch. The soname carries the major, but
  // a file renamed or linked by hand would not: an ABI of another major version is refused.
  const size_t version = lt.get_version();
  if (version / 10000 != CUBLAS_VER_MAJOR) {
    throw std::runtime_error("cuBLASLt: " + path + " is version " + std::to_string(version) +
                             "; vitpe was built with the headers of version " +
                             std::to_string(CUBLAS_VERSION) + " and needs the same major version");
  }
  return lt;
}

}  // namespace

const CublasLt& cublaslt() {
  // A failed load is not cached: the next call tries again (and throws again, with its reasons).
  static std::mutex mu;
  static const CublasLt* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded) loaded = new CublasLt(load());
  return *loaded;
}

}  // namespace vitpe::cuda
