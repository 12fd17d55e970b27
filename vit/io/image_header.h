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
  // Channels of the decoded image at most: 4 (a palette or gray + alpha PNG expands to 4); a
  // JPEG decodes to exactly 1 (gray) or 3 (BGR, CMYK converted).
  int channels = 4;
  // What the decoder holds beside the image, and what it is: the coefficients of every
  // component for a progressive or multi-scan JPEG (libjpeg keeps them all until the last scan:
  // 2 bytes a coefficient), a TIFF's tile or strip buffers (OpenCV's, libtiff's decoded one and,
  // for edge tiles, libtiff's RGBA raster). 0 and empty for the other formats.
  int64_t working_bytes = 0;
  std::string working;  // e.g. "TIFF tiles of 16384 x 16384 pixels"
  // For JPEG: the frame needs libjpeg's whole-image coefficient buffers (progressive, or a
  // first scan that holds fewer components than the frame).
  bool jpeg_multi_scan = false;

  // The bytes of the decoded image: width x height x channels x 1 or 2 bytes a sample.
  int64_t decoded_bytes() const;
  // What decoding it can take in all: decoded_bytes() + working_bytes.
  int64_t budget_bytes() const;
};

// The header of `bytes` (the start of the file or all of it). std::nullopt when the file is none
// of the formats above; throws std::runtime_error when it starts as one of them but its header
// is cut short or invalid (width or height 0 or negative, a TIFF without its size tags, a JPEG
// without a scan), or states what vitpe does not decode (TIFF samples that are not 1 to 16-bit
// unsigned integers, such as 32-bit floats; an animated WebP).
std::optional<ImageHeader> read_image_header(std::span<const uint8_t> bytes);

// The largest decode read_image allows (budget_bytes): 256 MiB (8192 x 8192 8-bit RGBA, about
// 5800 x 5800 for 16-bit samples, 9400 x 9400 for an RGB JPEG, 6600 x 6600 for a progressive
// one with 4:2:0 chroma); photos from cameras up to 64 megapixels fit.
constexpr int64_t kMaxDecodedImageBytes = int64_t{256} << 20;

}  // namespace vitpe
