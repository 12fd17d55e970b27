// Linear layer on the device through cuBLASLt: y = act(x w^T + b) + residual.
//
// Row-major y [M, N] = x [M, K] w^T is, seen column-major, D [N, M] = op(A) B with A = w
// viewed as [K, N] (ld K, transposed) and B = x viewed as [K, M] (ld K). The bias is one value
// per row of D, which is what CUBLASLT_EPILOGUE_BIAS broadcasts. The residual enters as C with
// beta = 1 (D = A B + C + bias), valid only without an activation because cuBLASLt applies the
// epilogue after adding C. GELU is applied by our exact (erf) kernel: cuBLASLt's GELU epilogue
// is the tanh approximation, which differs by up to ~1e-3.
// The algorithm for each (shape, dtype, epilogue, alignment) is chosen once by cuBLASLt's
// heuristic and cached; one 32 MiB workspace serves all calls (every call is on the default
// stream, so calls are ordered and never share the workspace at the same time). cuBLASLt itself
// is loaded on the first call (ops/cuda/cublaslt.h), not with libvitpe.

#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cublaslt.h"

namespace vitpe::cuda {

namespace {

using AlgoKey = std::tuple<int64_t, int64_t, int64_t, int, bool, bool, int, int, int, int>;

struct LtState {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = size_t{32} << 20;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
};

// Never destroyed: the handle and workspace live until the process exits (destroying them
// from a static destructor could run after the CUDA runtime has unloaded).
LtState& lt_state() {
  static LtState* s = new LtState();
  return *s;
}

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct OpDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~OpDesc() {
    if (d) (void)cublaslt().matmul_desc_destroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) (void)cublaslt().matrix_layout_destroy(l);
  }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() {
    if (p) (void)cublaslt().preference_destroy(p);
  }
};

// D [N, M] (col-major, ld N) = w^T-view times x-view (+ beta C) (+ bias per row).
void gemm(void* y, const void* x, const void* w, const void* bias, const void* c, float beta,
          int64_t M, int64_t N, int64_t K, DType dtype) {
  LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  const CublasLt& lt = cublaslt();  // loads the library on the first call
  if (!s.handle) {
    CUBLAS_CHECK(lt.create(&s.handle));
    CUDA_CHECK(cudaMalloc(&s.workspace, s.workspace_bytes));
  }
  const cudaDataType_t t = dtype == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;

  // "create the operation": f32 accumulation (pure f32 for f32 inputs: no TF32).
  OpDesc op;
  CUBLAS_CHECK(lt.matmul_desc_create(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(lt.matmul_desc_set_attribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(lt.matmul_desc_set_attribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  CUBLAS_CHECK(
      lt.matmul_desc_set_attribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias) {
    // The bias has the output's dtype (the default bias type for f32 and bf16 outputs).
    CUBLAS_CHECK(lt.matmul_desc_set_attribute(op.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
  }

  // "matrix layouts" (column-major views of the row-major tensors).
  Layout a, b, cd;
  CUBLAS_CHECK(
      lt.matrix_layout_create(&a.l, t, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
  CUBLAS_CHECK(
      lt.matrix_layout_create(&b.l, t, static_cast<uint64_t>(K), static_cast<uint64_t>(M), K));
  CUBLAS_CHECK(
      lt.matrix_layout_create(&cd.l, t, static_cast<uint64_t>(N), static_cast<uint64_t>(M), N));

  // "choose the algorithm" once per key.
  const void* cptr = c ? c : y;
  const int al_a = alignment_of(w), al_b = alignment_of(x), al_c = alignment_of(cptr),
            al_d = alignment_of(y);
  const AlgoKey key{M,    N,    K,   static_cast<int>(dtype), bias != nullptr, beta != 0.f, al_a,
                    al_b, al_c, al_d};
  auto it = s.algos.find(key);
  if (it == s.algos.end()) {
    Pref pref;
    CUBLAS_CHECK(lt.preference_create(&pref.p));
    CUBLAS_CHECK(
        lt.preference_set_attribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &s.workspace_bytes, sizeof s.workspace_bytes));
    const uint32_t als[4] = {static_cast<uint32_t>(al_a), static_cast<uint32_t>(al_b),
                             static_cast<uint32_t>(al_c), static_cast<uint32_t>(al_d)};
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      CUBLAS_CHECK(lt.preference_set_attribute(pref.p, attrs[i], &als[i], sizeof als[i]));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    CUBLAS_CHECK(lt.algo_get_heuristic(s.handle, op.d, a.l, b.l, cd.l, cd.l, pref.p, 1,
                                                &result, &found));
    if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error(
          "cuda::linear_forward: cuBLASLt has no algorithm for M=" + std::to_string(M) +
          " N=" + std::to_string(N) + " K=" + std::to_string(K) + " " + dtype_name(dtype));
    }
    it = s.algos.emplace(key, result.algo).first;
  }

  // "execute" on the default stream.
  const float alpha = 1.f;
  CUBLAS_CHECK(lt.matmul(s.handle, op.d, &alpha, w, a.l, x, b.l, &beta, cptr, cd.l, y, cd.l,
                              &it->second, s.workspace, s.workspace_bytes, 0));
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Act act,
                    const Tensor& residual) {
  const char* op = "cuda::linear_forward";
  check_device(op, "x", x);
  check_device(op, "w", w);
  check_device(op, "y", y);
  check_ndim(op, "w", w, 2);
  if (x.ndim() < 1) throw ShapeError(std::string(op) + ": x has no dimensions");
  const int64_t N = w.size(0), K = w.size(1);
  if (x.size(-1) != K) {
    throw ShapeError(std::string(op) + ": x " + x.shape().str() + " has " +
                     std::to_string(x.size(-1)) + " features, w " + w.shape().str() + " expects " +
                     std::to_string(K));
  }
  Shape ys = x.shape();
  ys[ys.size() - 1] = N;
  check_shape(op, "y", y, ys);
  check_dtype(op, "w", w, x.dtype());
  check_dtype(op, "y", y, x.dtype());
  if (b.defined()) {
    check_device(op, "b", b);
    check_shape(op, "b", b, Shape{N});
    check_dtype(op, "b", b, x.dtype());
  }
  if (residual.defined()) {
    check_device(op, "residual", residual);
    check_shape(op, "residual", residual, ys);
    check_dtype(op, "residual", residual, x.dtype());
    // Either the same buffer as y (in place, allowed by cuBLASLt when C == D) or disjoint.
    if (residual.raw() != y.raw() &&
        overlaps(residual.raw(), residual.nbytes(), y.raw(), y.nbytes()))
      throw std::invalid_argument(std::string(op) + ": residual partially overlaps y");
  }
  if (overlaps(y.raw(), y.nbytes(), x.raw(), x.nbytes()) ||
      overlaps(y.raw(), y.nbytes(), w.raw(), w.nbytes()))
    throw std::invalid_argument(std::string(op) + ": y must not overlap x or w");
  require_cuda(op);
  const int64_t M = K > 0 ? x.numel() / K : 0;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    throw ShapeError(std::string(op) + ": K = 0 (x " + x.shape().str() + ")");
  }

  const void* bias = b.defined() ? b.raw() : nullptr;
  if (act == Act::none) {
    const bool res = residual.defined();
    gemm(y.raw(), x.raw(), w.raw(), bias, res ? residual.raw() : nullptr, res ? 1.f : 0.f, M, N, K,
         x.dtype());
    return;
  }
  if (act != Act::gelu) {
    throw std::invalid_argument(std::string(op) +
                                ": the GPU runs no activation but GELU (quick_gelu is CPU only)");
  }
  // GELU: GEMM + bias, exact GELU in place, then the residual (act before residual).
  gemm(y.raw(), x.raw(), w.raw(), bias, nullptr, 0.f, M, N, K, x.dtype());
  cuda::gelu_forward(y, y);
  if (residual.defined()) cuda::add_forward(y, y, residual);
}

}  // namespace vitpe::cuda
