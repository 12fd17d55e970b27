// Header readers for the image formats vitpe decodes (vit/io/image_header.h). Each reads only
// fixed fields at checked offsets; none allocates more than the format name.
#include "vit/io/image_header.h"

#include <cstring>
#include <stdexcept>

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

ImageHeader make(const Reader& r, const char* format, int64_t width, int64_t height, int bits) {
  if (width <= 0 || height <= 0) {
    r.fail("expected a positive width and height, found " + std::to_string(width) + " x " +
           std::to_string(height));
  }
  return ImageHeader{format, width, height, bits > 8 ? 16 : 8};
}

ImageHeader png(const Reader& r) {
  // Signature (8), then the IHDR chunk: length (4), "IHDR", width, height, bit depth.
  const int64_t width = r.be32(16), height = r.be32(20);
  const int bits = static_cast<int>(r.u8(24));
  if (!r.starts_with(12, "IHDR")) r.fail("expected the IHDR chunk first");
  return make(r, "PNG", width, height, bits);
}

ImageHeader jpeg(const Reader& r) {
  // Segments after SOI: FF marker [length (2, including itself) payload]; the frame header
  // (SOF0..SOF15 except DHT C4, JPG C8, DAC CC) holds precision, height, width.
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
    if (marker == 0xD9 || marker == 0xDA) r.fail("no frame header before the image data");
    const uint32_t length = r.be16(at + 2);
    if (length < 2) r.fail("a segment length below 2 at byte " + std::to_string(at));
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      const int64_t height = r.be16(at + 5);
      if (height == 0) r.fail("height 0 (defined later by a DNL marker), which OpenCV cannot read");
      return make(r, "JPEG", r.be16(at + 7), height, static_cast<int>(r.u8(at + 4)));
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
  if (r.starts_with(12, "VP8X")) {  // extended: 24-bit canvas width-1, height-1
    return make(r, "WebP", int64_t{r.le24(24)} + 1, int64_t{r.le24(27)} + 1, 8);
  }
  r.fail("expected a VP8, VP8L or VP8X chunk");
}

ImageHeader tiff(const Reader& r) {
  const bool le = r.u8(0) == 'I';
  auto u16 = [&](size_t at) { return le ? r.le16(at) : r.be16(at); };
  auto u32 = [&](size_t at) { return le ? r.le32(at) : r.be32(at); };
  const size_t ifd = u32(4);
  const uint32_t entries = u16(ifd);
  int64_t width = -1, height = -1, bits = 8;
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + 12 * size_t{i};
    const uint32_t tag = u16(e), type = u16(e + 2);
    if (tag != 256 && tag != 257 && tag != 258) continue;
    // SHORT (3) values sit in the first two bytes of the value field, LONG (4) fill it. For
    // BitsPerSample with several samples the field is an offset; the samples share one depth
    // in every file OpenCV reads, so the first value is read there.
    uint32_t value;
    if (type == 3) {
      const uint32_t count = u32(e + 4);
      value = count <= 2 ? u16(e + 8) : u16(u32(e + 8));
    } else if (type == 4) {
      value = u32(e + 8);
    } else {
      r.fail("tag " + std::to_string(tag) + " has type " + std::to_string(type) +
             ", expected SHORT or LONG");
    }
    (tag == 256 ? width : tag == 257 ? height : bits) = value;
  }
  if (width < 0 || height < 0) r.fail("the first directory has no ImageWidth or ImageLength");
  return make(r, "TIFF", width, height, static_cast<int>(bits));
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
      static_cast<double>(width) * static_cast<double>(height) * 4.0 * (bits > 8 ? 2.0 : 1.0);
  return bytes >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(bytes);
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
