// JPEG decoding with libjpeg(-turbo) directly, giving the pixels OpenCV's decoder gives, with the
// checks OpenCV's lacks:
// - libjpeg's warnings are errors. OpenCV lets libjpeg print "Premature end of JPEG file" or
//   "Corrupt JPEG data" and go on, filling what is missing with gray or leaving it unwritten, so
//   a cut file was classified as if it were whole.
// - At most kMaxJpegScans scans: libjpeg reads any number, and each costs a pass over every
//   coefficient (an 8192 x 8192 file repeating one AC scan 20,000 times decoded for minutes).
// - libjpeg's working memory is capped at what the header check (vit/io/image_header.h) reserved
//   for it: the whole-image coefficient buffers of a progressive or multi-scan file.
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>
#include <span>

#include "vit/io/image_header.h"

namespace vitpe {

// A real progressive JPEG has about 10 scans (libjpeg's default script: 10 for colour, 6 for
// gray); tools that optimise the split rarely pass 20.
constexpr int kMaxJpegScans = 100;

// `bytes`: a whole JPEG file whose header `header` read (read_image_header). Returns what
// cv::imdecode(bytes, cv::IMREAD_UNCHANGED) returns for a valid file, bit for bit: 8-bit gray
// (1 component) or BGR (3 components; 4 components are CMYK, converted to BGR as OpenCV does).
// Throws std::runtime_error with libjpeg's message (the caller names the file): a warning, more
// than kMaxJpegScans scans, more working memory than the header promised, or a frame other than
// the one the header check read.
cv::Mat decode_jpeg(std::span<const uint8_t> bytes, const ImageHeader& header);

}  // namespace vitpe
