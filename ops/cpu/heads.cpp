// Head layout changes around attention on the CPU: split the fused qkv projection into per-head
// q, k, v, and merge the per-head outputs back into tokens.
//
// qkv: [B, N, 3*H*hd] -> q, k, v: [B, H, N, hd] (each token row is [q | k | v], head h at
// columns h*hd inside each third); o: [B, H, N, hd] -> y: [B, N, H*hd]. Both are pure
// permutations of hd-long contiguous runs; the loops copy one run per (b, h, n).
#include <cstring>
#include <string>
#include <utility>

#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

// Threshold (in copied floats) below which a fork costs more than the copy.
constexpr int64_t kParallelMin = 1 << 16;

}  // namespace

void split_heads_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t heads) {
  const OpScope scope(OpClass::copies);
  const char* op = "split_heads_forward";
  check_cpu_f32(op, "qkv", qkv);
  if (qkv.ndim() != 3 || heads <= 0 || qkv.size(2) % (3 * heads) != 0) {
    throw ShapeError(std::string(op) + ": expected qkv of shape [B, N, 3*H*hd] with H = " +
                     std::to_string(heads) + ", found " + qkv.shape().str());
  }
  const int64_t b = qkv.size(0), n = qkv.size(1), hd = qkv.size(2) / (3 * heads);
  const Shape out{b, heads, n, hd};
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    check_cpu_f32(op, name, *t);
    check_shape(op, name, *t, out);
  }
  const float* src = qkv.f32();
  float* dst[3] = {q.f32(), k.f32(), v.f32()};
  const int64_t row = 3 * heads * hd;
#pragma omp parallel for collapse(3) schedule(static) if (qkv.numel() > kParallelMin)
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < n; ++t)
        for (int p = 0; p < 3; ++p) {
          std::memcpy(dst[p] + ((i * heads + h) * n + t) * hd,
                      src + (i * n + t) * row + (p * heads + h) * hd, hd * sizeof(float));
        }
}

void split_heads_backward(Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const OpScope scope(OpClass::copies);
  const char* op = "split_heads_backward";
  if (!dqkv.defined()) return;
  check_cpu_f32(op, "dqkv", dqkv);
  const Tensor* grads[3] = {&dq, &dk, &dv};
  const char* names[3] = {"dq", "dk", "dv"};
  const Tensor* first = nullptr;
  for (int p = 0; p < 3; ++p) {
    if (!grads[p]->defined()) continue;
    check_cpu_f32(op, names[p], *grads[p]);
    if (grads[p]->ndim() != 4) {
      throw ShapeError(std::string(op) + ": expected " + names[p] +
                       " of shape [B, H, N, hd], found " + grads[p]->shape().str());
    }
    if (!first) first = grads[p];
    check_shape(op, names[p], *grads[p], first->shape());
  }
  if (!first) return;
  const int64_t b = first->size(0), heads = first->size(1), n = first->size(2), hd = first->size(3);
  check_shape(op, "dqkv", dqkv, Shape{b, n, 3 * heads * hd});
  float* dst = dqkv.f32();
  const int64_t row = 3 * heads * hd;
  for (int p = 0; p < 3; ++p) {
    if (!grads[p]->defined()) continue;
    const float* src = grads[p]->f32();
#pragma omp parallel for collapse(3) schedule(static) if (dqkv.numel() > kParallelMin)
    for (int64_t i = 0; i < b; ++i)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < n; ++t) {
          const float* s = src + ((i * heads + h) * n + t) * hd;
          float* d = dst + (i * n + t) * row + (p * heads + h) * hd;
          for (int64_t j = 0; j < hd; ++j) d[j] += s[j];
        }
  }
}

void merge_heads_forward(Tensor& y, const Tensor& o) {
  const OpScope scope(OpClass::copies);
  const char* op = "merge_heads_forward";
  check_cpu_f32(op, "o", o);
  if (o.ndim() != 4) {
    throw ShapeError(std::string(op) + ": expected o of shape [B, H, N, hd], found " +
                     o.shape().str());
  }
  const int64_t b = o.size(0), heads = o.size(1), n = o.size(2), hd = o.size(3);
  check_cpu_f32(op, "y", y);
  check_shape(op, "y", y, Shape{b, n, heads * hd});
  const float* src = o.f32();
  float* dst = y.f32();
#pragma omp parallel for collapse(3) schedule(static) if (o.numel() > kParallelMin)
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        std::memcpy(dst + ((i * n + t) * heads + h) * hd, src + ((i * heads + h) * n + t) * hd,
                    hd * sizeof(float));
      }
}

void merge_heads_backward(Tensor& d_o, const Tensor& dy) {
  const OpScope scope(OpClass::copies);
  const char* op = "merge_heads_backward";
  check_cpu_f32(op, "dy", dy);
  if (!d_o.defined()) return;
  check_cpu_f32(op, "d_o", d_o);
  if (d_o.ndim() != 4) {
    throw ShapeError(std::string(op) + ": expected d_o of shape [B, H, N, hd], found " +
                     d_o.shape().str());
  }
  const int64_t b = d_o.size(0), heads = d_o.size(1), n = d_o.size(2), hd = d_o.size(3);
  check_shape(op, "dy", dy, Shape{b, n, heads * hd});
  const float* src = dy.f32();
  float* dst = d_o.f32();
#pragma omp parallel for collapse(3) schedule(static) if (dy.numel() > kParallelMin)
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < n; ++t) {
        const float* s = src + ((i * n + t) * heads + h) * hd;
        float* d = dst + ((i * heads + h) * n + t) * hd;
        for (int64_t j = 0; j < hd; ++j) d[j] += s[j];
      }
}

}  // namespace vitpe
