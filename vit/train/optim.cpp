// AdamW, the schedule and clipping (see optim.h for the exact formulas).
#include "vit/train/optim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "ops/ops.h"

namespace vitpe {

namespace {

// The update and the clipping run over blocks of up to kBlock elements of every parameter in one
// parallel region, so the many small parameters (biases, norms, a small model's weights) are
// spread over the threads too, not updated one after another on one thread.
constexpr int64_t kBlock = 16384;

// Calls add(param index, begin, end) for each block of each parameter, in order.
template <class F>
void for_each_block(const std::vector<Param*>& params, F&& add) {
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i]->value.numel();
    for (int64_t b = 0; b < n; b += kBlock) add(i, b, std::min(n, b + kBlock));
  }
}

}  // namespace

AdamW::AdamW(std::vector<Param*> params, AdamWOptions options, std::vector<float> lr_scale)
    : params_(std::move(params)), lr_scale_(std::move(lr_scale)), opt_(options) {
  if (lr_scale_.empty()) lr_scale_.assign(params_.size(), 1.0f);
  if (lr_scale_.size() != params_.size()) {
    throw std::invalid_argument("AdamW: " + std::to_string(lr_scale_.size()) +
                                " learning-rate scales for " + std::to_string(params_.size()) +
                                " parameters");
  }
  for (Param* p : params_) {
    check_cpu_f32("AdamW", p->name.c_str(), p->value);
    m_.push_back(Tensor::zeros(p->value.shape()));
    v_.push_back(Tensor::zeros(p->value.shape()));
  }
  for_each_block(params_, [&](size_t i, int64_t b, int64_t e) { blocks_.push_back({i, b, e}); });
}

void AdamW::step(float lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(static_cast<double>(opt_.beta1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(opt_.beta2), static_cast<double>(t_));
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (const Param* p : params_) {
    if (p->grad.defined()) check_shape("AdamW", p->name.c_str(), p->grad, p->value.shape());
  }
  const int64_t count = static_cast<int64_t>(blocks_.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const Block& b = blocks_[static_cast<size_t>(i)];
    Param& p = *params_[b.param];
    if (!p.grad.defined()) continue;
    // A scale of 1 gives exactly lr: the same bits as an optimizer without scales.
    const float lr_p = lr * lr_scale_[b.param];
    const AdamWStep c{p.no_decay ? 1.0f : 1.0f - lr_p * opt_.weight_decay,
                      opt_.beta1,
                      opt_.beta2,
                      static_cast<float>(lr_p / bc1),
                      inv_sqrt_bc2,
                      opt_.eps};
    adamw_update(p.value.f32() + b.begin, p.grad.f32() + b.begin, m_[b.param].f32() + b.begin,
                 v_[b.param].f32() + b.begin, b.end - b.begin, c);
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
  struct Block {
    size_t param;
    int64_t begin, end;
  };
  std::vector<Block> blocks;
  for_each_block(params, [&](size_t i, int64_t b, int64_t e) {
    if (params[i]->grad.defined()) blocks.push_back({i, b, e});
  });
  const int64_t count = static_cast<int64_t>(blocks.size());
  std::vector<double> partial(blocks.size(), 0.0);
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const Block& b = blocks[static_cast<size_t>(i)];
    const float* g = params[b.param]->grad.f32();
    // Four interleaved sums (independent chains of additions), combined in a fixed order.
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t k = b.begin;
    for (; k + 4 <= b.end; k += 4) {
      for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(g[k + j]) * g[k + j];
    }
    for (; k < b.end; ++k) s[0] += static_cast<double>(g[k]) * g[k];
    partial[static_cast<size_t>(i)] = (s[0] + s[1]) + (s[2] + s[3]);
  }
  double sq = 0.0;
  for (double s : partial) sq += s;
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
#pragma omp parallel for schedule(static) if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      const Block& b = blocks[static_cast<size_t>(i)];
      float* g = params[b.param]->grad.f32();
      for (int64_t k = b.begin; k < b.end; ++k) g[k] *= scale;
    }
  }
  return norm;
}

}  // namespace vitpe
