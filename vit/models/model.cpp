// Model helpers shared by ViT and Swin, and the factory.
#include "vit/models/model.h"

#include <stdexcept>

#include "vit/models/layers.h"
#include "vit/models/swin.h"
#include "vit/models/vit.h"

namespace vitpe {

void Model::zero_grad() {
  for (Param* p : params()) {
    if (p->grad.defined() && p->grad.shape() == p->value.shape()) {
      p->grad.zero();
    } else {
      p->grad = Tensor::zeros(p->value.shape());
    }
  }
}

void Model::ensure_grads() {
  for (Param* p : params()) {
    if (!p->grad.defined() || p->grad.shape() != p->value.shape()) {
      p->grad = Tensor::zeros(p->value.shape());
    }
  }
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32:
      return "f32";
    case Precision::bf16:
      return "bf16";
    case Precision::bf16_emulated:
      return "bf16-emulated";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::f32, Precision::bf16, Precision::bf16_emulated}) {
    if (name == precision_name(p)) return p;
  }
  throw std::invalid_argument("unknown precision '" + name +
                              "': expected f32, bf16 or bf16-emulated");
}

bool bf16_supported() { return cpu_has_bf16(); }

void Model::set_precision(Precision p) {
  if (p == Precision::bf16 && !bf16_supported()) {
    throw std::runtime_error(
        std::string("bf16 compute needs oneDNN's bf16 matmul (a CPU with avx512_bf16 or AMX), "
                    "but oneDNN reports '") +
        cpu_isa_name() +
        "' here; use f32, or bf16-emulated to measure bf16's accuracy on this CPU");
  }
  std::vector<LinearLayer*> linears;
  collect_linears(linears);
  for (LinearLayer* l : linears) l->set_precision(p);
  precision_ = p;
}

namespace {
int64_t count(const std::vector<Param*>& params) {
  int64_t n = 0;
  for (const Param* p : params) n += p->value.numel();
  return n;
}
}  // namespace

int64_t Model::num_params() { return count(params()); }
int64_t Model::num_encoding_params() { return count(encoding_params()); }

std::unique_ptr<Model> make_model(const ModelConfig& config, uint64_t seed) {
  config.validate();
  if (config.kind == ModelKind::vit) return std::make_unique<VisionTransformer>(config, seed);
  return std::make_unique<SwinTransformer>(config, seed);
}

}  // namespace vitpe
