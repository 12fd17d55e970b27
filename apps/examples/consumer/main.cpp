// A vision application using the installed vitpe (find_package(vitpe), vitpe::vitpe): builds
// a small ViT from a preset, runs one image through it and checks the logits' shape.
#include <vitpe/vitpe.h>

#include <cmath>
#include <cstdio>
#include <cstring>

int main() {
  // Headers, library and package version file from one install agree.
  if (std::strcmp(vitpe::version(), VITPE_VERSION_STRING) != 0 ||
      std::strcmp(vitpe::version(), VITPE_PACKAGE_VERSION) != 0) {
    std::printf("vitpe consumer: version mismatch: library %s, headers %s, package %s\n",
                vitpe::version(), VITPE_VERSION_STRING, VITPE_PACKAGE_VERSION);
    return 1;
  }
  vitpe::LoadedModel loaded = vitpe::load_model("vit-fmnist");  // preset, random weights
  vitpe::Model& model = *loaded.model;
  const vitpe::ModelConfig& c = model.config();
  vitpe::Tensor x = vitpe::Tensor::full({1, c.channels, c.img_rows, c.img_cols}, 0.5f);
  const vitpe::Tensor& logits = model.forward(x);
  bool finite = true;
  for (int64_t i = 0; i < logits.numel(); ++i) finite = finite && std::isfinite(logits.at(i));
  std::printf("vitpe consumer: vitpe %s, %s -> logits %s (%s)\n", vitpe::version(), c.name.c_str(),
              logits.shape().str().c_str(), finite ? "finite" : "NOT finite");
  return logits.shape() == vitpe::Shape({1, c.classes}) && finite ? 0 : 1;
}
