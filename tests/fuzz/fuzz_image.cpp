// libFuzzer harness: image decoding and preprocessing (vit/io/preprocess.h) on arbitrary bytes,
// as `vitpe classify` reads a file: decoded once as RGB for a 224-pixel ImageNet model (bicubic,
// crop 0.875) and once as grayscale for the bundled 28-pixel Fashion-MNIST model. The decode and
// pixel budgets keep every input within the fuzzer's memory limit; an output that is not finite
// is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "vit/io/preprocess.h"

namespace {

void check_finite(const vitpe::Tensor& t) {
  const float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) vitpe::fuzz::finding("preprocessing", "a non-finite value");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int init = vitpe::fuzz::init_single_thread();
  (void)init;
  static const vitpe::fuzz::ScratchFile file(".img");
  const std::string& path = file.write(data, size);
  vitpe::fuzz::expect_clean([&] {
    const vitpe::Preprocess rgb;  // 224, bicubic, crop 0.875, ImageNet mean/std
    check_finite(vitpe::preprocess_file(path, rgb));
  });
  vitpe::fuzz::expect_clean([&] {
    vitpe::Preprocess gray;
    gray.rows = gray.cols = 28;
    gray.channels = 1;
    gray.crop_pct = 1.0;
    gray.mean = {vitpe::kFashionMnistMean};
    gray.std_dev = {vitpe::kFashionMnistStd};
    check_finite(vitpe::preprocess_file(path, gray));
  });
  return 0;
}
