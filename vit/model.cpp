// Model helpers shared by ViT and Swin, and the factory.
#include "vit/model.h"

#include "vit/swin.h"
#include "vit/vit.h"

namespace vitpe {

void Model::zero_grad() {
  for (Param* p : params()) p->grad.zero();
}

int64_t Model::num_params() {
  int64_t n = 0;
  for (Param* p : params()) n += p->value.numel();
  return n;
}

std::unique_ptr<Model> make_model(const ModelConfig& config, uint64_t seed) {
  config.validate();
  if (config.kind == ModelKind::vit) return std::make_unique<VisionTransformer>(config, seed);
  return std::make_unique<SwinTransformer>(config, seed);
}

}  // namespace vitpe
