// Head layout on the device: qkv [B, N, 3*H*hd] -> q, k, v [B, H, N, hd] and back
// o [B, H, N, hd] -> [B, N, H*hd]. One thread per element, consecutive threads on consecutive
// channels of a head so both reads and writes are coalesced in runs of hd.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace vitpe::cuda {

namespace {

template <typename T>
__global__ void split_heads_kernel(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
                                   const T* __restrict__ qkv, int64_t B, int64_t H, int64_t N,
                                   int64_t hd) {
  const int64_t total = B * H * N * hd, D = H * hd;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    // i indexes q/k/v [B, H, N, hd]
    const int64_t d = i % hd, n = (i / hd) % N, h = (i / (hd * N)) % H, b = i / (hd * N * H);
    const T* src = qkv + (b * N + n) * 3 * D + h * hd + d;
    q[i] = src[0];
    k[i] = src[D];
    v[i] = src[2 * D];
  }
}

template <typename T>
__global__ void merge_heads_kernel(T* __restrict__ y, const T* __restrict__ o, int64_t B, int64_t H,
                                   int64_t N, int64_t hd) {
  const int64_t total = B * H * N * hd;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    // i indexes y [B, N, H, hd]
    const int64_t d = i % hd, h = (i / hd) % H, n = (i / (hd * H)) % N, b = i / (hd * H * N);
    y[i] = o[((b * H + h) * N + n) * hd + d];
  }
}

}  // namespace

void split_heads_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t heads) {
  const char* op = "cuda::split_heads_forward";
  check_device(op, "qkv", qkv);
  check_device(op, "q", q);
  check_device(op, "k", k);
  check_device(op, "v", v);
  check_ndim(op, "qkv", qkv, 3);
  const int64_t B = qkv.size(0), N = qkv.size(1), D3 = qkv.size(2);
  if (heads <= 0 || D3 % (3 * heads) != 0) {
    throw ShapeError(std::string(op) + ": qkv " + qkv.shape().str() +
                     " has a last dimension that is not 3 * heads * head_dim with heads = " +
                     std::to_string(heads));
  }
  const int64_t hd = D3 / (3 * heads);
  const Shape want{B, heads, N, hd};
  check_shape(op, "q", q, want);
  check_shape(op, "k", k, want);
  check_shape(op, "v", v, want);
  check_dtype(op, "q", q, qkv.dtype());
  check_dtype(op, "k", k, qkv.dtype());
  check_dtype(op, "v", v, qkv.dtype());
  for (const Tensor* t : {&q, &k, &v}) {
    if (overlaps(t->raw(), t->nbytes(), qkv.raw(), qkv.nbytes()))
      throw std::invalid_argument(std::string(op) + ": q, k, v must not overlap qkv");
  }
  require_cuda(op);
  const int64_t total = q.numel();
  if (total == 0) return;
  dispatch_dtype(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    split_heads_kernel<T><<<grid_for(total, 256), 256>>>(
        static_cast<T*>(q.raw()), static_cast<T*>(k.raw()), static_cast<T*>(v.raw()),
        static_cast<const T*>(qkv.raw()), B, heads, N, hd);
  });
  CUDA_CHECK_LAUNCH("split_heads_kernel");
}

void merge_heads_forward(Tensor& y, const Tensor& o) {
  const char* op = "cuda::merge_heads_forward";
  check_device(op, "o", o);
  check_device(op, "y", y);
  check_ndim(op, "o", o, 4);
  const int64_t B = o.size(0), H = o.size(1), N = o.size(2), hd = o.size(3);
  check_shape(op, "y", y, Shape{B, N, H * hd});
  check_dtype(op, "y", y, o.dtype());
  if (overlaps(y.raw(), y.nbytes(), o.raw(), o.nbytes()))
    throw std::invalid_argument(std::string(op) + ": y must not overlap o");
  require_cuda(op);
  const int64_t total = o.numel();
  if (total == 0) return;
  dispatch_dtype(o.dtype(), [&](auto tag) {
    using T = decltype(tag);
    merge_heads_kernel<T><<<grid_for(total, 256), 256>>>(
        static_cast<T*>(y.raw()), static_cast<const T*>(o.raw()), B, H, N, hd);
  });
  CUDA_CHECK_LAUNCH("merge_heads_kernel");
}

}  // namespace vitpe::cuda
