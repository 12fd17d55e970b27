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
    EXPECT_EQ(h->decoded_bytes(), 37 * 23 * 4 * (c.bits / 8)) << c.ext;
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
