// libFuzzer harness: image decoding and preprocessing (vit/io/preprocess.h) on arbitrary bytes,
// as `vitpe classify` reads a file: decoded once, within a decode budget of 256 KiB instead of
// 256 MiB (decode_image's lower budget: the same header checks and decoders, but an input that
// states a large image is refused instead of spending the run's time on decoding and resizing
// it), then preprocessed as RGB for a 32-pixel model (bicubic, crop 0.875: the code of the
// 224-pixel ImageNet transform at a fiftieth of its pixels) and as grayscale for the bundled
// 28-pixel Fashion-MNIST model (bilinear, no crop). Decoding and resizing large images kept this
// harness near 100 executions a second. An output that is not finite is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "vit/io/preprocess.h"

namespace {

constexpr int64_t kHarnessBudget = int64_t{256} << 10;

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
  cv::Mat decoded;
  vitpe::fuzz::expect_clean([&] { decoded = vitpe::decode_image(path, kHarnessBudget); });
  if (decoded.empty()) return 0;
  vitpe::fuzz::expect_clean([&] {
    vitpe::Preprocess rgb;  // bicubic, crop 0.875, ImageNet mean/std
    rgb.rows = rgb.cols = 32;
    check_finite(vitpe::preprocess_image(vitpe::to_uint8_channels(decoded, 3, path), rgb));
  });
  vitpe::fuzz::expect_clean([&] {
    vitpe::Preprocess gray;
    gray.rows = gray.cols = 28;
    gray.channels = 1;
    gray.crop_pct = 1.0;
    gray.interpolation = vitpe::Interpolation::bilinear;
    gray.mean = {vitpe::kFashionMnistMean};
    gray.std_dev = {vitpe::kFashionMnistStd};
    check_finite(vitpe::preprocess_image(vitpe::to_uint8_channels(decoded, 1, path), gray));
  });
  return 0;
}
