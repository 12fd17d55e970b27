// AdamW, the schedule and clipping (see optim.h for the exact formulas).
#include "vit/train/optim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace vitpe {

AdamW::AdamW(std::vector<Param*> params, AdamWOptions options)
    : params_(std::move(params)), opt_(options) {
  for (Param* p : params_) {
    check_cpu_f32("AdamW", p->name.c_str(), p->value);
    m_.push_back(Tensor::zeros(p->value.shape()));
    v_.push_back(Tensor::zeros(p->value.shape()));
  }
}

void AdamW::step(float lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(static_cast<double>(opt_.beta1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(opt_.beta2), static_cast<double>(t_));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float b1 = opt_.beta1, b2 = opt_.beta2, eps = opt_.eps;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = *params_[i];
    if (!p.grad.defined()) continue;
    check_shape("AdamW", p.name.c_str(), p.grad, p.value.shape());
    float* w = p.value.f32();
    const float* g = p.grad.f32();
    float* m = m_[i].f32();
    float* v = v_[i].f32();
    const float decay = p.no_decay ? 1.0f : 1.0f - lr * opt_.weight_decay;
    const int64_t n = p.value.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t k = 0; k < n; ++k) {
      w[k] *= decay;
      m[k] = b1 * m[k] + (1.0f - b1) * g[k];
      v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
      w[k] -= step_size * m[k] / (std::sqrt(v[k]) * inv_sqrt_bc2 + eps);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, Tensor>> s;
  for (size_t i = 0; i < params_.size(); ++i) {
    s.emplace_back("m." + params_[i]->name, m_[i]);
    s.emplace_back("v." + params_[i]->name, v_[i]);
  }
  return s;
}

void AdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t steps) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name[name] = &t;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto [prefix, dst] : {std::pair{"m.", &m_[i]}, std::pair{"v.", &v_[i]}}) {
      const std::string key = prefix + params_[i]->name;
      auto it = by_name.find(key);
      if (it == by_name.end()) {
        throw std::runtime_error("AdamW state: missing entry '" + key + "'");
      }
      check_shape("AdamW state", key.c_str(), *it->second, params_[i]->value.shape());
      dst->copy_from(*it->second);
    }
  }
  t_ = steps;
}

double Schedule::at(int64_t step) const {
  if (step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t span = total - warmup;
  if (span <= 0) return base_lr;
  double t = static_cast<double>(step - warmup) / static_cast<double>(span);
  if (t > 1.0) t = 1.0;
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
}

double clip_grad_norm(const std::vector<Param*>& params, double max_norm) {
  // Fixed blocks summed in a fixed order: the norm is bitwise the same for any thread count
  // (an OpenMP reduction combines partial sums in an unspecified order).
  constexpr int64_t kBlock = 16384;
  double sq = 0.0;
  std::vector<double> partial;
  for (const Param* p : params) {
    if (!p->grad.defined()) continue;
    const float* g = p->grad.f32();
    const int64_t n = p->grad.numel();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    partial.assign(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (blocks > 4)
    for (int64_t b = 0; b < blocks; ++b) {
      double s = 0.0;
      const int64_t end = std::min(n, (b + 1) * kBlock);
      for (int64_t k = b * kBlock; k < end; ++k) s += static_cast<double>(g[k]) * g[k];
      partial[b] = s;
    }
    for (double s : partial) sq += s;
  }
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (Param* p : params) {
      if (!p->grad.defined()) continue;
      float* g = p->grad.f32();
      for (int64_t k = 0; k < p->grad.numel(); ++k) g[k] *= scale;
    }
  }
  return norm;
}

}  // namespace vitpe
