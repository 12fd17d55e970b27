// Header readers for the image formats vitpe decodes (vit/io/image_header.h). Each reads only
// fixed fields at checked offsets; none allocates more than the format name.
#include "vit/io/image_header.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace vitpe {

namespace {

// Bounds-checked big- and little-endian reads; a read past the end means the header is cut.
class Reader {
 public:
  Reader(std::span<const uint8_t> b, const char* format) : b_(b), format_(format) {}
  bool has(size_t at, size_t n) const { return at <= b_.size() && n <= b_.size() - at; }
  uint32_t u8(size_t at) const { return need(at, 1)[0]; }
  uint32_t be16(size_t at) const {
    const uint8_t* p = need(at, 2);
    return uint32_t{p[0]} << 8 | p[1];
  }
  uint32_t le16(size_t at) const {
    const uint8_t* p = need(at, 2);
    return uint32_t{p[1]} << 8 | p[0];
  }
  uint32_t be32(size_t at) const {
    const uint8_t* p = need(at, 4);
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
  }
  uint32_t le32(size_t at) const {
    const uint8_t* p = need(at, 4);
    return uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0];
  }
  uint32_t le24(size_t at) const {
    const uint8_t* p = need(at, 3);
    return uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0];
  }
  bool starts_with(size_t at, const char* text) const {
    const size_t n = std::strlen(text);
    return has(at, n) && std::memcmp(b_.data() + at, text, n) == 0;
  }
  size_t size() const { return b_.size(); }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(std::string("invalid ") + format_ + " header: " + what);
  }

 private:
  const uint8_t* need(size_t at, size_t n) const {
    if (!has(at, n)) fail("the file ends inside it (" + std::to_string(b_.size()) + " bytes)");
    return b_.data() + at;
  }
  std::span<const uint8_t> b_;
  const char* format_;
};

// Sizes computed from headers (up to 2^32 x 2^32 pixels, and tiles as large) in double, kept at
// most 2^61 bytes: far past any budget, and two of them still add up within int64.
constexpr int64_t kSaturatedBytes = int64_t{1} << 61;
int64_t saturated(double bytes) {
  return bytes >= static_cast<double>(kSaturatedBytes) ? kSaturatedBytes
                                                       : static_cast<int64_t>(bytes);
}

ImageHeader make(const Reader& r, const char* format, int64_t width, int64_t height, int bits) {
  if (width <= 0 || height <= 0) {
    r.fail("expected a positive width and height, found " + std::to_string(width) + " x " +
           std::to_string(height));
  }
  ImageHeader h;
  h.format = format;
  h.width = width;
  h.height = height;
  h.bits = bits > 8 ? 16 : 8;
  return h;
}

ImageHeader png(const Reader& r) {
  // Signature (8), then the IHDR chunk: length (4), "IHDR", width, height, bit depth.
  const int64_t width = r.be32(16), height = r.be32(20);
  const int bits = static_cast<int>(r.u8(24));
  if (!r.starts_with(12, "IHDR")) r.fail("expected the IHDR chunk first");
  return make(r, "PNG", width, height, bits);
}

// libjpeg's whole-image coefficient buffers (jdcoefct.c): per component, its blocks across and
// down (the image scaled by its sampling factors over the largest, in 8 x 8 blocks), rounded up
// to its sampling factors, at 64 coefficients of 2 bytes.
int64_t jpeg_coefficient_bytes(int64_t width, int64_t height, const std::vector<uint32_t>& h,
                               const std::vector<uint32_t>& v) {
  const uint32_t h_max = *std::max_element(h.begin(), h.end());
  const uint32_t v_max = *std::max_element(v.begin(), v.end());
  int64_t bytes = 0;
  for (size_t c = 0; c < h.size(); ++c) {
    auto blocks = [](int64_t size, uint32_t f, uint32_t f_max) {
      const int64_t n = (size * f + 8 * f_max - 1) / (8 * f_max);
      return (n + f - 1) / f * f;
    };
    bytes += blocks(width, h[c], h_max) * blocks(height, v[c], v_max) * 128;
  }
  return bytes;
}

ImageHeader jpeg(const Reader& r) {
  // Segments after SOI: FF marker [length (2, including itself) payload]; the frame header
  // (SOF0..SOF15 except DHT C4, JPG C8, DAC CC) holds precision, height, width and per component
  // its sampling factors; the first scan header (SOS) says how many components it holds.
  std::optional<ImageHeader> frame;
  bool progressive = false;
  std::vector<uint32_t> h, v;
  size_t at = 2;
  while (true) {
    if (r.u8(at) != 0xFF) r.fail("expected a marker at byte " + std::to_string(at));
    uint32_t marker = r.u8(at + 1);
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no payload
      at += 2;
      continue;
    }
    if (marker == 0xD9 || (marker == 0xDA && !frame)) {
      r.fail("no frame header before the image data");
    }
    const uint32_t length = r.be16(at + 2);
    if (length < 2) r.fail("a segment length below 2 at byte " + std::to_string(at));
    if (marker == 0xDA) {
      const uint32_t in_scan = r.u8(at + 4);
      frame->jpeg_multi_scan = progressive || in_scan < h.size();
      if (frame->jpeg_multi_scan) {
        frame->working_bytes = jpeg_coefficient_bytes(frame->width, frame->height, h, v);
        frame->working = std::string(progressive ? "a progressive" : "a multi-scan") +
                         " JPEG's coefficients of " + std::to_string(h.size()) + " component" +
                         (h.size() > 1 ? "s" : "");
      }
      return *frame;
    }
    const bool sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof && !frame) {
      const int64_t height = r.be16(at + 5);
      if (height == 0) r.fail("height 0 (defined later by a DNL marker), which OpenCV cannot read");
      frame = make(r, "JPEG", r.be16(at + 7), height, static_cast<int>(r.u8(at + 4)));
      const uint32_t components = r.u8(at + 9);
      if (components == 0) r.fail("a frame of 0 components");
      for (uint32_t c = 0; c < components; ++c) {
        const uint32_t factors = r.u8(at + 11 + 3 * size_t{c});
        h.push_back(factors >> 4);
        v.push_back(factors & 15);
        if (h.back() < 1 || h.back() > 4 || v.back() < 1 || v.back() > 4) {
          r.fail("sampling factors " + std::to_string(h.back()) + "x" + std::to_string(v.back()) +
                 " (expected 1 to 4)");
        }
      }
      frame->channels = components == 1 ? 1 : 3;
      progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
    }
    at += 2 + length;
  }
}

ImageHeader bmp(const Reader& r) {
  const uint32_t dib = r.le32(14);
  if (dib == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit width and height
    return make(r, "BMP", r.le16(18), r.le16(20), 8);
  }
  if (dib < 40) r.fail("unknown DIB header size " + std::to_string(dib));
  const int64_t width = static_cast<int32_t>(r.le32(18));
  int64_t height = static_cast<int32_t>(r.le32(22));
  if (height < 0) height = -height;  // top-down rows
  return make(r, "BMP", width, height, 8);
}

ImageHeader webp(const Reader& r) {
  r.be32(12);                       // the first chunk's tag must be there
  if (r.starts_with(12, "VP8 ")) {  // lossy: frame tag (3), start code 9D 01 2A, 14-bit sizes
    if (r.u8(23) != 0x9D || r.u8(24) != 0x01 || r.u8(25) != 0x2A) r.fail("bad VP8 start code");
    return make(r, "WebP", r.le16(26) & 0x3FFF, r.le16(28) & 0x3FFF, 8);
  }
  if (r.starts_with(12, "VP8L")) {  // lossless: signature 2F, then 14-bit width-1, height-1
    if (r.u8(20) != 0x2F) r.fail("bad VP8L signature");
    const uint32_t bits = r.le32(21);
    return make(r, "WebP", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 8);
  }
  if (r.starts_with(12, "VP8X")) {  // extended: flags, then 24-bit canvas width-1, height-1
    const ImageHeader h = make(r, "WebP", int64_t{r.le24(24)} + 1, int64_t{r.le24(27)} + 1, 8);
    // OpenCV decodes one still image; its decoder calls an animation corrupt.
    if (r.u8(20) & 0x02) {
      throw std::runtime_error("an animated WebP is not supported (expected a single frame)");
    }
    return h;
  }
  r.fail("expected a VP8, VP8L or VP8X chunk");
}

ImageHeader tiff(const Reader& r) {
  const bool le = r.u8(0) == 'I';
  auto u16 = [&](size_t at) { return le ? r.le16(at) : r.be16(at); };
  auto u32 = [&](size_t at) { return le ? r.le32(at) : r.be32(at); };
  const size_t ifd = u32(4);
  const uint32_t entries = u16(ifd);
  // The first directory's tags that decide the decode's size (OpenCV reads the first image).
  enum Tag : uint32_t {
    kWidth = 256,
    kHeight = 257,
    kBits = 258,
    kPhotometric = 262,
    kSamples = 277,
    kRowsPerStrip = 278,
    kTileWidth = 322,
    kTileLength = 323,
    kSampleFormat = 339
  };
  int64_t width = -1, height = -1, bits = 8, samples = 1, rows_per_strip = -1;
  int64_t tile_width = -1, tile_height = -1, photometric = -1, sample_format = 1;
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + 12 * size_t{i};
    const uint32_t tag = u16(e), type = u16(e + 2);
    int64_t* field = tag == kWidth          ? &width
                     : tag == kHeight       ? &height
                     : tag == kBits         ? &bits
                     : tag == kPhotometric  ? &photometric
                     : tag == kSamples      ? &samples
                     : tag == kRowsPerStrip ? &rows_per_strip
                     : tag == kTileWidth    ? &tile_width
                     : tag == kTileLength   ? &tile_height
                     : tag == kSampleFormat ? &sample_format
                                            : nullptr;
    if (field == nullptr) continue;
    // SHORT (3) values sit in the first two bytes of the value field, LONG (4) fill it; more
    // than fit there (BitsPerSample or SampleFormat per sample) are at an offset. Samples share
    // one depth and format in every file libtiff reads, so the first value is read.
    const uint32_t count = u32(e + 4);
    if (type == 3) {
      *field = count <= 2 ? u16(e + 8) : u16(u32(e + 8));
    } else if (type == 4) {
      *field = count <= 1 ? u32(e + 8) : u32(u32(e + 8));
    } else {
      r.fail("tag " + std::to_string(tag) + " has type " + std::to_string(type) +
             ", expected SHORT or LONG");
    }
  }
  if (width < 0 || height < 0) r.fail("the first directory has no ImageWidth or ImageLength");
  ImageHeader h = make(r, "TIFF", width, height, static_cast<int>(bits));
  // vitpe reads unsigned samples of up to 16 bits; OpenCV would decode the others (floats,
  // signed or 32-bit integers, LogLuv HDR) at 4 or 8 bytes a sample before they are refused.
  if (sample_format != 1 || bits < 1 || bits > 16 || photometric == 32844 || photometric == 32845) {
    const std::string kind = sample_format == 3                             ? "-bit float"
                             : sample_format == 2                           ? "-bit signed integer"
                             : photometric == 32844 || photometric == 32845 ? "-bit LogLuv"
                                                                            : "-bit";
    throw std::runtime_error("a TIFF of " + std::to_string(bits) + kind +
                             " samples is not supported (expected unsigned integer samples of 1 "
                             "to 16 bits)");
  }
  // The unit libtiff decodes at once and OpenCV buffers: a tile (when the file is tiled), else a
  // strip of RowsPerStrip rows (absent or 0: the whole image, as libtiff reads it).
  const bool tiled = tile_width >= 0 || tile_height >= 0;
  const int64_t unit_w = tiled && tile_width > 0 ? tile_width : width;
  const int64_t unit_h =
      tiled ? (tile_height > 0 ? tile_height : height)
            : (rows_per_strip > 0 && rows_per_strip < height ? rows_per_strip : height);
  // OpenCV's buffer (4 samples of 1 or 2 bytes), libtiff's RGBA raster for a tile at the edge
  // (4 bytes) and libtiff's decoded unit (every sample): a bound on what one unit takes.
  const double bytes_per_sample = bits > 8 ? 2.0 : 1.0;
  const double unit_bytes = static_cast<double>(unit_w) * static_cast<double>(unit_h) *
                            (4.0 * bytes_per_sample + 4.0 +
                             static_cast<double>(std::max<int64_t>(samples, 1)) * bytes_per_sample);
  h.working_bytes = saturated(unit_bytes);
  h.working = std::string(tiled ? "TIFF tiles of " : "TIFF strips of ") + std::to_string(unit_w) +
              " x " + std::to_string(unit_h) + " pixels";
  return h;
}

// PNM: "P1".."P6" then width, height (and maxval) as decimal text separated by whitespace and
// '#' comments; "P7" (PAM): header lines "WIDTH w", "HEIGHT h", "MAXVAL m", ... "ENDHDR".
ImageHeader pnm(std::span<const uint8_t> b, const Reader& r) {
  size_t at = 2;
  auto skip_space = [&] {
    while (at < b.size()) {
      if (b[at] == '#') {
        while (at < b.size() && b[at] != '\n') ++at;
      } else if (b[at] == ' ' || b[at] == '\t' || b[at] == '\r' || b[at] == '\n') {
        ++at;
      } else {
        break;
      }
    }
  };
  auto number = [&](const char* what) {
    skip_space();
    int64_t v = 0;
    size_t digits = 0;
    while (at < b.size() && b[at] >= '0' && b[at] <= '9' && digits < 10) {
      v = v * 10 + (b[at++] - '0');
      ++digits;
    }
    if (digits == 0) r.fail(std::string("expected the ") + what + " as a decimal number");
    return v;
  };
  if (b[1] != '7') {
    const int64_t width = number("width"), height = number("height");
    const bool bitmap = b[1] == '1' || b[1] == '4';
    const int64_t maxval = bitmap ? 1 : number("maximum value");
    return make(r, "PNM", width, height, maxval > 255 ? 16 : 8);
  }
  int64_t width = -1, height = -1, maxval = 255;
  while (true) {
    skip_space();
    if (r.starts_with(at, "ENDHDR")) break;
    if (r.starts_with(at, "WIDTH")) {
      at += 5;
      width = number("WIDTH");
    } else if (r.starts_with(at, "HEIGHT")) {
      at += 6;
      height = number("HEIGHT");
    } else if (r.starts_with(at, "MAXVAL")) {
      at += 6;
      maxval = number("MAXVAL");
    } else {
      while (at < b.size() && b[at] != '\n') ++at;  // DEPTH, TUPLTYPE: not needed
      if (at >= b.size()) r.fail("no ENDHDR line");
    }
  }
  return make(r, "PNM", width, height, maxval > 255 ? 16 : 8);
}

}  // namespace

int64_t ImageHeader::decoded_bytes() const {
  // Every format stores width and height in at most 32 bits, so the product can pass int64.
  const double bytes =
      static_cast<double>(width) * static_cast<double>(height) * channels * (bits > 8 ? 2.0 : 1.0);
  return saturated(bytes);
}

int64_t ImageHeader::budget_bytes() const {
  // Each term at most 2^61 (saturated), so the sum cannot overflow (found by fuzz_image).
  return decoded_bytes() + std::min(working_bytes, kSaturatedBytes);
}

std::optional<ImageHeader> read_image_header(std::span<const uint8_t> bytes) {
  auto is = [&](size_t at, const char* magic, size_t n) {
    return bytes.size() >= at + n && std::memcmp(bytes.data() + at, magic, n) == 0;
  };
  if (is(0, "\x89PNG\r\n\x1a\n", 8)) return png(Reader(bytes, "PNG"));
  if (is(0, "\xFF\xD8", 2)) return jpeg(Reader(bytes, "JPEG"));
  if (is(0, "BM", 2)) return bmp(Reader(bytes, "BMP"));
  if (is(0, "RIFF", 4) && is(8, "WEBP", 4)) return webp(Reader(bytes, "WebP"));
  if (is(0, "II*\0", 4) || is(0, "MM\0*", 4)) return tiff(Reader(bytes, "TIFF"));
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '7') {
    return pnm(bytes, Reader(bytes, "PNM"));
  }
  return std::nullopt;
}

}  // namespace vitpe
