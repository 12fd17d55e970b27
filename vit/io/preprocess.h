// Image preprocessing equal to timm's evaluation transform (timm 0.9 `create_transform` with
// is_training=False, crop_mode 'center'), with OpenCV for decoding only.
//
// timm loads images with PIL (`Image.open(f).convert('RGB')`) and resizes them with PIL, so we
// reproduce PIL, not OpenCV, for every step that changes pixel values:
// 1. decode (cv::IMREAD_UNCHANGED, so no EXIF rotation: PIL does not rotate either) and convert
//    to 8-bit RGB as convert('RGB'): BGR -> RGB, alpha dropped (not composited), grayscale
//    replicated. 16-bit samples become v >> 8 (PIL keeps the high byte of 16-bit RGB/RGBA PNGs;
//    for 16-bit GRAYSCALE PIL's convert clips values to 255 instead, which whitens the image: we
//    use v >> 8 there too, a deliberate deviation). With channels == 1 a colour image becomes
//    L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, as PIL's convert('L').
// 2. resize with PIL's two-pass separable filter on uint8 (horizontal pass, then vertical, each
//    rounded to uint8 with PIL's 22-bit fixed-point coefficients; antialiased when shrinking).
//    With s_r = floor(rows / crop_pct) and s_c = floor(cols / crop_pct): crop_mode "squash"
//    resizes to s_c x s_r; crop_mode "center" (the default): when s_r == s_c (square
//    targets) the shorter side becomes s_r and the longer int(s_r * long / short), as
//    torchvision's Resize(int); otherwise (timm's ResizeKeepRatio) ratio = min(h / s_r, w / s_c),
//    new size = round-half-even(h / ratio) x round-half-even(w / ratio). NOTE: timm 0.9 resizes
//    non-square targets BILINEARLY whatever interpolation is configured; we honour
//    `interpolation`, so set it to bilinear to reproduce timm there.
// 3. centre crop rows x cols with torchvision's rounding (top = round-half-even((h - rows) / 2)),
//    zero-padding first when the resized image is smaller (crop_pct > 1).
// 4. x = (v / 255 - mean) / std in f32, channel-major (CHW).
// Against PIL 9.4 + timm 0.9.16 the result is bit-identical on tests/data/images (see
// tests/vit/test_preprocess.cpp).
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "vitpe/ops/tensor.h"
#include "vitpe/vit/models/model.h"

namespace vitpe {

// Interpolation and CropMode (and their names) are the model config's (vit/models/config.h).

struct Preprocess {
  int rows = 224;  // output height
  int cols = 224;  // output width
  double crop_pct = 0.875;
  CropMode crop_mode = CropMode::center;
  Interpolation interpolation = Interpolation::bicubic;
  std::vector<float> mean = kImageNetMean;  // one per channel
  std::vector<float> std_dev = kImageNetStd;
  int channels = 3;  // 3 (RGB) or 1 (L)

  // The model's own: its input size and channels, crop_pct, crop_mode, interpolation, mean and
  // std, so an application cannot apply another model's statistics by accident.
  static Preprocess from(const ModelConfig& config);

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

// Decodes an image file as OpenCV does with IMREAD_UNCHANGED (BGR(A) or gray, 8 or 16 bits),
// after checking it: a regular file of a format vitpe decodes (vit/io/image_header.h) whose
// header promises at most kMaxDecodedImageBytes (256 MiB) of pixels and decoder memory; decodes
// in all threads together stay within that budget too (vit/io/decode_budget.h: a decode waits
// for others). JPEG goes through libjpeg directly (vit/io/jpeg.h: the same pixels, but a cut or
// corrupt file is an error, not gray). Throws std::runtime_error naming the file and what was
// expected and found (missing, not a regular file, unknown format, over the budget, corrupt).
cv::Mat decode_image(const std::string& path);
// The same within a lower budget of `max_bytes` (1 to 256 MiB) for this decode: a fuzzer's, or a
// service's that wants smaller images; the decodes of all threads still share the 256 MiB.
cv::Mat decode_image(const std::string& path, int64_t max_bytes);

// decode_image, then step 1: uint8 RGB (channels == 3) or L (channels == 1).
cv::Mat read_image(const std::string& path, int channels = 3);

// Whether the name ends in an extension of the formats read_image reads (.png, .jpg, .jpeg,
// .bmp, .webp, .tif, .tiff, .ppm, .pgm; any case): how a folder's images are told from its other
// files.
bool has_image_extension(const std::string& path);
// "png, jpg, jpeg, bmp, webp, tif, tiff, ppm, pgm", for messages.
const char* image_extensions_text();

// Step 1 on an already decoded OpenCV image (BGR channel order, as cv::imread returns it).
// `source` names the image in error messages.
cv::Mat to_uint8_channels(const cv::Mat& decoded, int channels, const std::string& source);

// PIL's Image.resize on a uint8 image with 1 to 4 channels -> width x height.
cv::Mat pil_resize(const cv::Mat& img, int width, int height, Interpolation interp);

// The size (width, height) that step 2 resizes a width x height image to.
cv::Size resized_size(int width, int height, const Preprocess& cfg);

// Steps 2 and 3: uint8 image -> uint8 rows x cols image with the same channels.
cv::Mat resize_and_crop(const cv::Mat& img, const Preprocess& cfg);

// Steps 2 to 4 on a uint8 RGB/L image -> out: [channels, rows, cols] floats (caller's memory).
void preprocess_into(const cv::Mat& img, const Preprocess& cfg, float* out);

// A rectangle of an image in pixels: what a random-resized crop cuts out before resizing.
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

// Throws std::invalid_argument unless `box` is a non-empty rectangle inside a width x height
// `what` ("image", "sample"), naming both.
void check_crop_box(const CropBox& box, int64_t width, int64_t height, const char* what);

// timm's training transform after its random draws: torchvision's
// F.resized_crop(img, top, left, height, width, (cfg.rows, cfg.cols), cfg.interpolation) (a PIL
// crop, then PIL's resize of it to exactly rows x cols), a horizontal flip when `flip`, then
// step 4 with cfg's mean and std. cfg.crop_pct and crop_mode do not apply. Throws
// std::invalid_argument for a box outside the image or an image of other channels than cfg's.
void resized_crop_into(const cv::Mat& img, const CropBox& box, bool flip, const Preprocess& cfg,
                       float* out);

// uint8 RGB/L image -> [channels, rows, cols].
Tensor preprocess_image(const cv::Mat& img, const Preprocess& cfg);

// Image file -> [channels, rows, cols].
Tensor preprocess_file(const std::string& path, const Preprocess& cfg);

// Image files -> [B, channels, rows, cols], images processed in parallel. Without `errors` the
// first failure throws (its message names the file). With `errors`, it is resized to B and
// errors[i] holds the message for image i (empty when it loaded); failed images are zeros.
Tensor preprocess_files(const std::vector<std::string>& paths, const Preprocess& cfg,
                        std::vector<std::string>* errors = nullptr);

}  // namespace vitpe
