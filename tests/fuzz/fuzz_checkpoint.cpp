// libFuzzer harness: checkpoint loading (vit/io/checkpoint.h) on arbitrary bytes: format
// detection from the names, our config JSON in the metadata, timm / torchvision name mapping,
// config inference from shapes, the config-against-tensors check and the strict parameter load.
// A model that loads and is small runs one forward pass at its configured size, so a config the
// checks let through but the model cannot run shows here.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "vit/io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int init = vitpe::fuzz::init_single_thread();
  (void)init;
  static const vitpe::fuzz::ScratchFile file(".safetensors");
  const std::string& path = file.write(data, size);
  vitpe::fuzz::expect_clean([&] {
    vitpe::LoadedModel loaded = vitpe::load_model(path);
    vitpe::Model& model = *loaded.model;
    const vitpe::ModelConfig& c = model.config();
    // Bounded work per input: forward only small models (the seeds are such models).
    if (model.num_params() > 200000 || c.img_rows * c.img_cols > 64 * 64 ||
        model.flops_per_image() > 5e7) {
      return;
    }
    const vitpe::Tensor images = vitpe::Tensor::zeros({1, c.channels, c.img_rows, c.img_cols});
    const vitpe::Tensor& logits = model.forward(images);
    if (logits.shape() != vitpe::Shape{1, c.classes}) {
      vitpe::fuzz::finding("forward returned another logits shape", logits.shape().str().c_str());
    }
  });
  return 0;
}
