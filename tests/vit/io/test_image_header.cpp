// Tests of vit/io/image_header: the size every supported format declares is read from its header
// alone (checked against what OpenCV writes and decodes), cut or invalid headers are errors, and
// decode_image refuses a small file that would decode past the budget before decoding it.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing.h"
#include "vit/io/decode_budget.h"
#include "vit/io/image_header.h"
#include "vit/io/preprocess.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> encode(const std::string& ext, const cv::Mat& img) {
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(cv::imencode(ext, img, bytes)) << ext;
  return bytes;
}

struct Case {
  std::string ext, format;
  int type, bits;
};

TEST(ImageHeader, ReadsTheSizeOfEveryFormatOpenCvWrites) {
  const std::vector<Case> cases = {
      {".png", "PNG", CV_8UC1, 8},   {".png", "PNG", CV_8UC3, 8},    {".png", "PNG", CV_8UC4, 8},
      {".png", "PNG", CV_16UC3, 16}, {".jpg", "JPEG", CV_8UC1, 8},   {".jpg", "JPEG", CV_8UC3, 8},
      {".bmp", "BMP", CV_8UC3, 8},   {".bmp", "BMP", CV_8UC1, 8},    {".webp", "WebP", CV_8UC3, 8},
      {".tif", "TIFF", CV_8UC3, 8},  {".tif", "TIFF", CV_16UC1, 16}, {".pgm", "PNM", CV_8UC1, 8},
      {".ppm", "PNM", CV_8UC3, 8},   {".pgm", "PNM", CV_16UC1, 16},  {".pbm", "PNM", CV_8UC1, 8},
      {".pam", "PNM", CV_8UC3, 8},
  };
  for (const Case& c : cases) {
    cv::Mat img(23, 37, c.type);
    cv::randu(img, 0, c.bits > 8 ? 65536 : 256);
    const std::vector<uint8_t> bytes = encode(c.ext, img);
    const auto h = read_image_header(bytes);
    ASSERT_TRUE(h.has_value()) << c.ext;
    EXPECT_EQ(h->format, c.format) << c.ext;
    EXPECT_EQ(h->width, 37) << c.ext;
    EXPECT_EQ(h->height, 23) << c.ext;
    EXPECT_EQ(h->bits, c.bits) << c.ext << " type " << c.type;
    // A JPEG decodes to gray or BGR exactly; the others to at most 4 channels.
    const int channels = c.format != "JPEG" ? 4 : CV_MAT_CN(c.type) == 1 ? 1 : 3;
    EXPECT_EQ(h->decoded_bytes(), 37 * 23 * channels * (c.bits / 8)) << c.ext;
    const cv::Mat decoded = cv::imdecode(bytes, cv::IMREAD_UNCHANGED);
    EXPECT_LE(static_cast<int64_t>(decoded.total() * decoded.elemSize()), h->decoded_bytes());
  }
}

TEST(ImageHeader, LossyLosslessAndExtendedWebP) {
  cv::Mat img(50, 70, CV_8UC4, cv::Scalar(1, 2, 3, 128));
  for (int quality : {50, 101}) {  // 101: lossless (VP8L); with alpha lossy is VP8X
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(cv::imencode(".webp", img, bytes, {cv::IMWRITE_WEBP_QUALITY, quality}));
    const auto h = read_image_header(bytes);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->width, 70) << quality;
    EXPECT_EQ(h->height, 50) << quality;
  }
}

TEST(ImageHeader, OtherFormatsAreNotRecognised) {
  for (std::string text : {"GIF89a....", "", "P", "hello", "\x76\x2f\x31\x01 exr"}) {
    std::vector<uint8_t> bytes(text.begin(), text.end());
    EXPECT_FALSE(read_image_header(bytes).has_value()) << text;
  }
}

TEST(ImageHeader, CutOrInvalidHeadersAreErrors) {
  cv::Mat img(23, 37, CV_8UC3, cv::Scalar::all(9));
  for (const char* ext : {".png", ".jpg", ".bmp", ".webp", ".tif"}) {
    const std::vector<uint8_t> bytes = encode(ext, img);
    for (size_t cut : {size_t{14}, size_t{20}}) {
      const std::vector<uint8_t> head(bytes.begin(), bytes.begin() + cut);
      try {
        read_image_header(head);
        ADD_FAILURE() << ext << " cut at " << cut << ": expected an error";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("the file ends inside it"), std::string::npos)
            << e.what();
      }
    }
  }
  std::vector<uint8_t> zero_width = encode(".png", img);
  zero_width[16] = zero_width[17] = zero_width[18] = zero_width[19] = 0;
  EXPECT_THROW(
      {
        try {
          read_image_header(zero_width);
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("found 0 x 23"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
  const std::string pnm = "P5\n# no size\nabc";
  EXPECT_THROW(read_image_header(std::vector<uint8_t>(pnm.begin(), pnm.end())), std::runtime_error);
}

// A PNG that says 60000 x 60000 and compresses to almost nothing: a 14 GB decode refused from
// its header, before OpenCV allocates anything.
TEST(ImageHeader, DecodeImageRefusesAHugeWellCompressedPngFromItsHeader) {
  cv::Mat small(8, 8, CV_8UC1, cv::Scalar::all(0));
  std::vector<uint8_t> png = encode(".png", small);
  auto put_be32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
  };
  const fs::path path =
      fs::temp_directory_path() / ("vitpe_huge_" + std::to_string(getpid()) + ".png");
  // 4294967295 is the largest size a PNG can state (its byte count once overflowed the message's
  // rounding: found by fuzz_image).
  for (uint32_t side : {60000u, 4294967295u}) {
    put_be32(16, side);
    put_be32(20, side);
    put_be32(29, static_cast<uint32_t>(crc32(crc32(0, nullptr, 0), png.data() + 12, 17)));
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
    const std::string message = testing::message_of([&] { decode_image(path.string()); });
    const std::string size = std::to_string(side) + " x " + std::to_string(side);
    EXPECT_NE(message.find(size + " pixels of 8 bits"), std::string::npos) << message;
    EXPECT_NE(message.find("more than the 256 MiB budget"), std::string::npos) << message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  }
  fs::remove(path);
}

TEST(ImageHeader, DecodeImageNamesUnknownFormatsByTheirFirstBytes) {
  const fs::path path = fs::temp_directory_path() / ("vitpe_gif_" + std::to_string(getpid()));
  std::ofstream(path) << "GIF89a";
  const std::string message = testing::message_of([&] { decode_image(path.string()); });
  EXPECT_NE(message.find("not a PNG, JPEG, BMP, WebP, TIFF or PNM file (it starts with bytes 47 "
                         "49 46 38)"),
            std::string::npos)
      << message;
  std::ofstream(path, std::ios::trunc).flush();
  EXPECT_NE(testing::message_of([&] { decode_image(path.string()); }).find("the file is empty"),
            std::string::npos);
  fs::remove(path);
}

// A little-endian classic TIFF: the first directory holds `tags` (tag, type, count, value or
// offset; sorted by tag), `data` follows it. Offsets in `tags` are relative to `data`: add
// data_start(tags.size()).
struct TiffTag {
  uint16_t tag, type;
  uint32_t count, value;
};
size_t data_start(size_t tags) { return 8 + 2 + 12 * tags + 4; }
std::vector<uint8_t> tiff(const std::vector<TiffTag>& tags, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {'I', 'I', 42, 0, 8, 0, 0, 0};
  auto put16 = [&](uint32_t v) {
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
  };
  auto put32 = [&](uint32_t v) {
    put16(v & 0xFFFF);
    put16(v >> 16);
  };
  put16(static_cast<uint32_t>(tags.size()));
  for (const TiffTag& t : tags) {
    put16(t.tag);
    put16(t.type);
    put32(t.count);
    put32(t.value);
  }
  put32(0);  // no next directory
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
void put32_at(std::vector<uint8_t>& d, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) d[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

std::string decode_message(const std::vector<uint8_t>& bytes, const std::string& name) {
  const fs::path path = fs::temp_directory_path() / (name + std::to_string(getpid()));
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const std::string m = testing::message_of([&] { decode_image(path.string()); });
  fs::remove(path);
  return m;
}

// A TIFF's decode holds its tile or strip buffers beside the image: a 1 MB file stated 1 x 1 with
// a 16384 x 16384 tile peaked at 4.4 GB, and a float32 5792 x 5792 file at 1.27 GB before it was
// refused (2 bytes a sample were counted). The budget now counts tiles and strips, and samples
// other than 1 to 16-bit unsigned integers are refused from the header.
TEST(ImageHeader, TiffBudgetCountsTilesStripsAndSampleFormats) {
  // A valid 32 x 32 RGB file of four 16 x 16 tiles decodes to its pixels. The tiles are PackBits
  // runs of literals (one count byte, then up to 128 bytes): OpenCV's in-memory decode refuses
  // uncompressed tiles (libtiff: "Invalid tile byte count").
  constexpr size_t kTags = 11;
  const size_t base = data_start(kTags);
  std::vector<uint8_t> data(6 + 16 + 16);  // bits per sample, tile offsets, tile byte counts
  data[0] = data[2] = data[4] = 8;
  cv::Mat rgb(32, 32, CV_8UC3);
  cv::randu(rgb, 0, 256);
  for (int t = 0; t < 4; ++t) {
    std::vector<uint8_t> tile;
    for (int y = 0; y < 16; ++y) {
      const uint8_t* row = rgb.ptr<uint8_t>((t / 2) * 16 + y) + (t % 2) * 16 * 3;
      tile.insert(tile.end(), row, row + 16 * 3);
    }
    put32_at(data, 6 + 4 * t, static_cast<uint32_t>(base + data.size()));
    put32_at(data, 22 + 4 * t, 768 + 6);
    for (size_t at = 0; at < tile.size(); at += 128) {
      data.push_back(127);
      data.insert(data.end(), tile.begin() + at, tile.begin() + at + 128);
    }
  }
  auto tiled = [&](uint32_t width, uint32_t height, uint32_t tile) {
    return std::vector<TiffTag>{{256, 4, 1, width},
                                {257, 4, 1, height},
                                {258, 3, 3, static_cast<uint32_t>(base)},
                                {259, 3, 1, 32773},
                                {262, 3, 1, 2},
                                {277, 3, 1, 3},
                                {284, 3, 1, 1},
                                {322, 4, 1, tile},
                                {323, 4, 1, tile},
                                {324, 4, 4, static_cast<uint32_t>(base + 6)},
                                {325, 4, 4, static_cast<uint32_t>(base + 22)}};
  };
  const std::vector<uint8_t> good = tiff(tiled(32, 32, 16), data);
  const auto h = read_image_header(good);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->working, "TIFF tiles of 16 x 16 pixels");
  EXPECT_EQ(h->working_bytes, 16 * 16 * (4 + 4 + 3));
  const fs::path path = fs::temp_directory_path() / ("vitpe_tiled_" + std::to_string(getpid()));
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(good.size()));
  const cv::Mat decoded = decode_image(path.string());
  fs::remove(path);
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  ASSERT_EQ(decoded.type(), CV_8UC3);
  EXPECT_EQ(cv::norm(decoded, bgr, cv::NORM_INF), 0.0);

  // 1 x 1 with one tile of 16384 x 16384: refused from the header.
  std::string m = decode_message(tiff(tiled(1, 1, 16384), data), "vitpe_tile_");
  EXPECT_NE(m.find("its TIFF header says 1 x 1 pixels of 8 bits, and its decoder holds TIFF tiles "
                   "of 16384 x 16384 pixels (2816 MiB)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("more than the 256 MiB budget"), std::string::npos) << m;
  // The largest sizes a TIFF can state, image and tile: the budget's own sum once overflowed
  // int64 (found by fuzz_image).
  const std::vector<uint8_t> largest = tiff(tiled(4294967295u, 4294967295u, 4294967295u), data);
  EXPECT_GT(read_image_header(largest)->budget_bytes(), kMaxDecodedImageBytes);
  m = decode_message(largest, "vitpe_largest_");
  EXPECT_NE(m.find("4294967295 x 4294967295 pixels"), std::string::npos) << m;
  EXPECT_NE(m.find("more than the 256 MiB budget"), std::string::npos) << m;
  // 8192 x 8192 RGBA in one strip: the strip buffers take three times the image.
  const std::vector<TiffTag> strip = {{256, 4, 1, 8192}, {257, 4, 1, 8192}, {258, 3, 1, 8},
                                      {262, 3, 1, 2},    {277, 3, 1, 4},    {273, 4, 1, 0}};
  m = decode_message(tiff(strip, {}), "vitpe_strip_");
  EXPECT_NE(m.find("TIFF strips of 8192 x 8192 pixels (768 MiB)"), std::string::npos) << m;
  // Float, signed and 32-bit samples: refused by name.
  const std::vector<TiffTag> floats = {
      {256, 4, 1, 5792}, {257, 4, 1, 5792}, {258, 3, 1, 32}, {262, 3, 1, 1}, {339, 3, 1, 3}};
  m = decode_message(tiff(floats, {}), "vitpe_float_");
  EXPECT_NE(m.find("a TIFF of 32-bit float samples is not supported (expected unsigned integer "
                   "samples of 1 to 16 bits)"),
            std::string::npos)
      << m;
  cv::Mat f32(5, 7, CV_32FC1, cv::Scalar(0.5));
  EXPECT_NE(testing::message_of([&] {
              read_image_header(encode(".tif", f32));
            }).find("32-bit float samples"),
            std::string::npos);
  const std::vector<TiffTag> signed16 = {
      {256, 4, 1, 5}, {257, 4, 1, 5}, {258, 3, 1, 16}, {262, 3, 1, 1}, {339, 3, 1, 2}};
  EXPECT_NE(testing::message_of([&] {
              read_image_header(tiff(signed16, {}));
            }).find("16-bit signed integer samples"),
            std::string::npos);
}

// OpenCV's WebP decoder called an animation corrupt; the header says what it is.
TEST(ImageHeader, AnAnimatedWebPIsRefusedByName) {
  std::vector<uint8_t> webp = {'R', 'I', 'F', 'F', 30,  0,  0, 0, 'W', 'E',  'B',
                               'P', 'V', 'P', '8', 'X', 10, 0, 0, 0,   0x02, 0,
                               0,   0,   9,   0,   0,   9,  0, 0};  // flags: animation; 10 x 10
  const std::string m = testing::message_of([&] { read_image_header(webp); });
  EXPECT_NE(m.find("an animated WebP is not supported (expected a single frame)"),
            std::string::npos)
      << m;
  webp[20] = 0x10;  // alpha only: a still image
  EXPECT_EQ(read_image_header(webp)->width, 10);
}

// Decodes in parallel threads share one budget: a reservation that does not fit waits, the sum
// in force never passes the capacity, and an image larger than the capacity runs alone instead
// of waiting forever.
TEST(DecodeBudget, ParallelReservationsNeverExceedTheCapacity) {
  DecodeBudget budget(100);
  std::atomic<int64_t> held{0}, worst{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const int64_t want = 10 + 17 * ((t + i) % 6);  // 10..95, one 180 (clamped to 100)
        DecodeBudget::Hold h = budget.reserve(i == 7 ? 180 : want);
        const int64_t now = held += h.bytes();
        int64_t w = worst.load();
        while (now > w && !worst.compare_exchange_weak(w, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        held -= h.bytes();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(worst.load(), 100);
  EXPECT_LE(budget.peak(), 100);
  EXPECT_EQ(budget.in_use(), 0);

  DecodeBudget::Hold a = budget.reserve(60);
  DecodeBudget::Hold b = std::move(a);  // moving keeps one reservation
  EXPECT_EQ(budget.in_use(), 60);
  EXPECT_EQ(a.bytes(), 0);
  b = DecodeBudget::Hold();
  EXPECT_EQ(budget.in_use(), 0);
}

}  // namespace
}  // namespace vitpe
