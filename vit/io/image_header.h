// What an image file says about itself before it is decoded: its format and size, read from the
// header alone, so a small file that would decode to gigabytes (a well-compressed PNG of
// 60000 x 60000 pixels is a few hundred kilobytes) is refused before OpenCV allocates anything.
//
// Formats vitpe decodes: PNG, JPEG, BMP, WebP, TIFF (classic, not BigTIFF) and PNM
// (P1-P7). Everything else OpenCV could read (OpenEXR, Radiance HDR, JPEG 2000, Sun raster,
// PFM, GDAL's formats) is refused by read_image: their decoders are rarely needed to classify
// photos and their headers are not checked here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace vitpe {

struct ImageHeader {
  std::string format;  // "PNG", "JPEG", "BMP", "WebP", "TIFF", "PNM"
  int64_t width = 0, height = 0;
  int bits = 8;  // bits per sample (16 for 16-bit PNG / TIFF / PNM)
  // The most bytes OpenCV's IMREAD_UNCHANGED decode can allocate for it: up to 4 channels of
  // 1 or 2 bytes (a palette or gray + alpha PNG expands to 4 channels).
  int64_t decoded_bytes() const;
};

// The header of `bytes` (the start of the file or all of it). std::nullopt when the file is none
// of the formats above; throws std::runtime_error when it starts as one of them but its header
// is cut short or invalid (width or height 0 or negative, a TIFF without its size tags).
std::optional<ImageHeader> read_image_header(std::span<const uint8_t> bytes);

// The largest decode read_image allows: 256 MiB (8192 x 8192 8-bit RGBA, about 5800 x 5800 for
// 16-bit samples); photos from cameras up to 64 megapixels fit.
constexpr int64_t kMaxDecodedImageBytes = int64_t{256} << 20;

}  // namespace vitpe
