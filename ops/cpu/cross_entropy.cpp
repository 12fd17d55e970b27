// Softmax cross entropy with label smoothing on the CPU (the classification loss).
//
// logits: [B, C], targets: B class indices. Target distribution t = (1 - s) one-hot + s / C, so
// a row's loss is -sum_c t_c log p_c = lse - (1 - s) z_target - (s / C) sum_c z_c with
// lse = log sum_c exp(z_c). The forward keeps softmax(logits) in `probs` for the backward:
// dlogits += (p - t) / B * loss_scale.
#include <cmath>
#include <string>

#include "ops/cpu/dnnl_cache.h"
#include "ops/cpu/vec_math.h"
#include "ops/op_profile.h"
#include "ops/ops.h"

namespace vitpe {

namespace {

void check_targets(const char* op, const int32_t* targets, int64_t b, int64_t c) {
  if (b > 0 && targets == nullptr) throw std::invalid_argument(std::string(op) + ": no targets");
  for (int64_t i = 0; i < b; ++i) {
    if (targets[i] < 0 || targets[i] >= c) {
      throw std::invalid_argument(std::string(op) + ": target " + std::to_string(i) + " is " +
                                  std::to_string(targets[i]) + ", expected a class in [0, " +
                                  std::to_string(c) + ")");
    }
  }
}

void check_smoothing(const char* op, float s) {
  if (!(s >= 0.0f && s < 1.0f)) {
    throw std::invalid_argument(std::string(op) + ": label smoothing must be in [0, 1), found " +
                                std::to_string(s));
  }
}

int64_t classes_of(const char* op, const Tensor& t, const char* what) {
  check_cpu_f32(op, what, t);
  if (t.ndim() != 2) {
    throw ShapeError(std::string(op) + ": expected " + what + " of shape [B, C], found " +
                     t.shape().str());
  }
  return t.size(1);
}

// Writes softmax(z) to p and returns the row's log-sum-exp.
VITPE_AVX2 double row_avx2(float* p, const float* z, int64_t c) {
  float mx, sum;
  cpu::softmax_row<cpu::f32x8>(p, z, 1.0f, nullptr, nullptr, c, &mx, &sum);
  return mx + std::log(static_cast<double>(sum));
}
double row_base(float* p, const float* z, int64_t c) {
  float mx, sum;
  cpu::softmax_row<cpu::f32x4>(p, z, 1.0f, nullptr, nullptr, c, &mx, &sum);
  return mx + std::log(static_cast<double>(sum));
}

}  // namespace

float cross_entropy_forward(Tensor& probs, const Tensor& logits, const int32_t* targets,
                            float smoothing) {
  const char* op = "cross_entropy_forward";
  const OpScope scope(OpClass::other);
  const int64_t c = classes_of(op, logits, "logits");
  const int64_t b = logits.size(0);
  check_cpu_f32(op, "probs", probs);
  check_shape(op, "probs", probs, logits.shape());
  check_smoothing(op, smoothing);
  if (c == 0) throw ShapeError(std::string(op) + ": logits have no classes");
  check_targets(op, targets, b, c);
  if (b == 0) return 0.0f;
  const float* pz = logits.f32();
  float* pp = probs.f32();
  const double s = smoothing;
  const bool avx2 = cpu::cpu_has_avx2_fma();
  // Each row's loss, then their sum in row order: the same bits on any thread count (an OpenMP
  // reduction adds the threads' partial sums in an order of its own).
  double* row_loss = static_cast<double*>(
      cpu::scratch(cpu::ScratchSlot::elementwise_0, static_cast<size_t>(b) * sizeof(double)));
#pragma omp parallel for schedule(static) if (b * c > 65536)
  for (int64_t i = 0; i < b; ++i) {
    const float* zr = pz + i * c;
    const double lse = avx2 ? row_avx2(pp + i * c, zr, c) : row_base(pp + i * c, zr, c);
    double zsum = 0.0;
    if (s != 0.0) {
      for (int64_t j = 0; j < c; ++j) zsum += zr[j];
    }
    row_loss[i] = lse - (1.0 - s) * pz[i * c + targets[i]] - s / static_cast<double>(c) * zsum;
  }
  double total = 0.0;
  for (int64_t i = 0; i < b; ++i) total += row_loss[i];
  return static_cast<float>(total / static_cast<double>(b));
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& probs, const int32_t* targets,
                            float smoothing, float loss_scale) {
  const OpScope scope(OpClass::other);
  const char* op = "cross_entropy_backward";
  const int64_t c = classes_of(op, probs, "probs");
  const int64_t b = probs.size(0);
  check_smoothing(op, smoothing);
  check_targets(op, targets, b, c);
  if (!dlogits.defined() || b == 0) return;
  check_cpu_f32(op, "dlogits", dlogits);
  check_shape(op, "dlogits", dlogits, probs.shape());
  const float* pp = probs.f32();
  float* pd = dlogits.f32();
  const float k = loss_scale / static_cast<float>(b);
  const float off = smoothing / static_cast<float>(c);  // target mass of every class
  const float on = 1.0f - smoothing;                    // extra mass of the labelled class
#pragma omp parallel for schedule(static) if (b * c > 65536)
  for (int64_t i = 0; i < b; ++i) {
    const float* pr = pp + i * c;
    float* dr = pd + i * c;
    for (int64_t j = 0; j < c; ++j) dr[j] += k * (pr[j] - off);
    dr[targets[i]] -= k * on;
  }
}

}  // namespace vitpe
