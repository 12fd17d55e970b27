// Tests of vit/io/jpeg: on valid files the pixels are OpenCV's to the bit (every kind of JPEG
// libjpeg's compressor makes: gray, chroma sampling factors, RGB, CMYK and YCCK, multi-scan,
// progressive, arithmetic coding, restart markers), and the files OpenCV decoded wrongly or
// without bound are errors: cut or corrupt data, too many scans, a frame other than the
// header's, more memory than the header promised.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "ops/util.h"
#include "tests/jpeg_testing.h"
#include "tests/testing.h"
#include "vit/io/image_header.h"
#include "vit/io/jpeg.h"
#include "vit/io/preprocess.h"

namespace vitpe {
namespace {

using testing::encode_jpeg;
using testing::JpegOptions;

// A smooth picture with detail (so every coefficient band carries data), `channels` of 8 bits.
cv::Mat picture(int rows, int cols, int channels) {
  cv::Mat m(rows, cols, CV_MAKETYPE(CV_8U, channels));
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = (x * (3 + c) + y * (5 - c) + ((x * y) % 37) * (c + 1)) % 256;
        m.ptr<uint8_t>(y)[x * channels + c] = static_cast<uint8_t>(v);
      }
    }
  }
  return m;
}

cv::Mat decode(const std::vector<uint8_t>& jpeg) {
  const auto header = read_image_header(jpeg);
  EXPECT_TRUE(header.has_value());
  return decode_jpeg(jpeg, *header);
}

std::string decode_error(const std::vector<uint8_t>& jpeg) {
  return testing::message_of([&] { decode(jpeg); });
}

void expect_equal_to_opencv(const std::vector<uint8_t>& jpeg, const std::string& what) {
  const cv::Mat want = cv::imdecode(jpeg, cv::IMREAD_UNCHANGED);
  ASSERT_FALSE(want.empty()) << what;
  const cv::Mat got = decode(jpeg);
  ASSERT_EQ(got.type(), want.type()) << what;
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(cv::norm(got, want, cv::NORM_INF), 0.0) << what;
}

TEST(Jpeg, DecodesEveryKindAsOpenCvDoesBitForBit) {
  struct Case {
    std::string what;
    int channels;
    JpegOptions o;
  };
  std::vector<Case> cases = {
      {"gray", 1, {.jpeg_space = JCS_GRAYSCALE, .h0 = 1, .v0 = 1}},
      {"4:2:0", 3, {}},
      {"4:4:4", 3, {.h0 = 1, .v0 = 1}},
      {"4:2:2", 3, {.h0 = 2, .v0 = 1}},
      {"4:4:0", 3, {.h0 = 1, .v0 = 2}},
      {"4:1:1", 3, {.h0 = 4, .v0 = 1}},
      {"RGB", 3, {.jpeg_space = JCS_RGB, .h0 = 1, .v0 = 1}},
      {"CMYK", 4, {.jpeg_space = JCS_CMYK, .h0 = 1, .v0 = 1}},
      {"YCCK", 4, {.jpeg_space = JCS_YCCK}},
      {"progressive", 3, {.progressive = true}},
      {"progressive gray", 1, {.jpeg_space = JCS_GRAYSCALE, .h0 = 1, .v0 = 1, .progressive = true}},
      {"progressive CMYK", 4, {.jpeg_space = JCS_CMYK, .h0 = 1, .v0 = 1, .progressive = true}},
      {"scan per component", 3, {.scan_per_component = true}},
      {"arithmetic", 3, {.arithmetic = true}},
      {"arithmetic progressive", 3, {.progressive = true, .arithmetic = true}},
      {"restart markers", 3, {.restart_rows = 1}},
      {"quality 100", 3, {.quality = 100}},
      {"quality 5", 3, {.quality = 5}},
  };
  for (const Case& c : cases) {
    for (const cv::Size size : {cv::Size(61, 47), cv::Size(1, 1), cv::Size(17, 130)}) {
      const std::vector<uint8_t> jpeg =
          encode_jpeg(picture(size.height, size.width, c.channels), c.o);
      expect_equal_to_opencv(
          jpeg, c.what + " " + std::to_string(size.width) + "x" + std::to_string(size.height));
    }
  }
  // And what OpenCV's encoder writes, and the JPEG the preprocessing goldens use.
  std::vector<uint8_t> cv_jpeg;
  ASSERT_TRUE(cv::imencode(".jpg", picture(45, 67, 3), cv_jpeg,
                           {cv::IMWRITE_JPEG_PROGRESSIVE, 1, cv::IMWRITE_JPEG_OPTIMIZE, 1}));
  expect_equal_to_opencv(cv_jpeg, "OpenCV's progressive");
  std::ifstream in(std::string(VITPE_TEST_DATA) + "/images/photo_61x47.jpg", std::ios::binary);
  const std::vector<uint8_t> photo((std::istreambuf_iterator<char>(in)), {});
  expect_equal_to_opencv(photo, "photo_61x47.jpg");
}

// OpenCV decoded a cut file with libjpeg's warning only ("Premature end of JPEG file"), filling
// the rest with gray: an 800-byte cut of a 6 KB JPEG was classified "Sandal 86.9 %", exit 0.
TEST(Jpeg, CutOrCorruptDataIsAnError) {
  const std::vector<uint8_t> whole = encode_jpeg(picture(96, 96, 3), {.quality = 95});
  ASSERT_GT(whole.size(), 4000u);
  const std::vector<uint8_t> cut(whole.begin(), whole.begin() + 800);
  EXPECT_FALSE(cv::imdecode(cut, cv::IMREAD_UNCHANGED).empty());  // what OpenCV accepted
  std::string m = decode_error(cut);
  EXPECT_NE(m.find("cannot decode its JPEG data: Premature end of JPEG file"), std::string::npos)
      << m;
  // The data stops early but the file ends properly (EOI right after the cut).
  std::vector<uint8_t> ended = cut;
  ended.insert(ended.end(), {0xFF, 0xD9});
  EXPECT_FALSE(cv::imdecode(ended, cv::IMREAD_UNCHANGED).empty());
  m = decode_error(ended);
  EXPECT_NE(m.find("Corrupt JPEG data"), std::string::npos) << m;
  // Bytes after the image data that belong to nothing (libjpeg's read-ahead takes a few).
  std::vector<uint8_t> extra = whole;
  extra.insert(extra.end() - 2, 100, 0x55);
  m = decode_error(extra);
  EXPECT_NE(m.find("extraneous bytes before marker 0xd9"), std::string::npos) << m;
  // Progressive files are read whole before the first row: a cut one fails the same way.
  const std::vector<uint8_t> prog = encode_jpeg(picture(96, 96, 3), {.progressive = true});
  const std::vector<uint8_t> prog_cut(prog.begin(), prog.begin() + prog.size() / 2);
  EXPECT_NE(decode_error(prog_cut).find("Premature end of JPEG file"), std::string::npos);
}

// A 6 KB JPEG whose frame header claims 8192 x 8192 (within the budget for 3 components) was
// classified with only libjpeg's warning; its data runs out in the first rows.
TEST(Jpeg, AHeaderClaimingFarMoreThanItsDataIsAnError) {
  std::vector<uint8_t> jpeg = encode_jpeg(picture(64, 64, 3), {});
  for (size_t at = 2; at + 9 < jpeg.size(); at += 2 + (size_t{jpeg[at + 2]} << 8 | jpeg[at + 3])) {
    if (jpeg[at + 1] == 0xC0) {  // SOF0: FF C0, length, precision, height, width
      jpeg[at + 5] = jpeg[at + 7] = 0x20;
      jpeg[at + 6] = jpeg[at + 8] = 0x00;
      break;
    }
  }
  const auto header = read_image_header(jpeg);
  ASSERT_TRUE(header.has_value());
  ASSERT_EQ(header->width, 8192);
  EXPECT_LE(header->budget_bytes(), kMaxDecodedImageBytes);
  const double t0 = monotonic_seconds();
  const std::string m = decode_error(jpeg);
  EXPECT_NE(m.find("Corrupt JPEG data"), std::string::npos) << m;
  EXPECT_LT(monotonic_seconds() - t0, 10.0);
}

// The scan bomb: libjpeg accepts a first AC scan repeated any number of times (each rewrites the
// same coefficients, so no progression warning), and each costs a pass over the whole image.
// kMaxJpegScans scans decode, to OpenCV's pixels; one more is refused.
TEST(Jpeg, ScansPastTheLimitAreRefused) {
  const std::vector<uint8_t> two = encode_jpeg(
      picture(128, 96, 1), {.jpeg_space = JCS_GRAYSCALE, .h0 = 1, .v0 = 1, .dc_then_ac = true});
  ASSERT_EQ(testing::jpeg_scans(two).size(), 2u);
  const std::vector<uint8_t> at_limit = testing::repeat_scan(two, 1, kMaxJpegScans - 2);
  ASSERT_EQ(testing::jpeg_scans(at_limit).size(), static_cast<size_t>(kMaxJpegScans));
  expect_equal_to_opencv(at_limit, "at the scan limit");
  EXPECT_EQ(cv::norm(decode(at_limit), decode(two), cv::NORM_INF), 0.0);
  const std::vector<uint8_t> past = testing::repeat_scan(two, 1, kMaxJpegScans - 1);
  EXPECT_FALSE(cv::imdecode(past, cv::IMREAD_UNCHANGED).empty());  // OpenCV reads them all
  const std::string m = decode_error(past);
  EXPECT_NE(m.find("more than " + std::to_string(kMaxJpegScans) + " scans"), std::string::npos)
      << m;
}

// The budget reserved for a JPEG comes from its header; the decoder refuses a frame or a scan
// layout the header check did not see, and caps libjpeg at what was reserved.
TEST(Jpeg, TheDecoderHoldsToWhatTheHeaderCheckReserved) {
  const std::vector<uint8_t> prog = encode_jpeg(picture(40, 40, 3), {.progressive = true});
  ImageHeader h = *read_image_header(prog);
  EXPECT_TRUE(h.jpeg_multi_scan);
  // 40 x 40 at 4:2:0: luma 5 x 5 blocks rounded up to 6 x 6, each chroma 3 x 3; 128 bytes each.
  EXPECT_EQ(h.working_bytes, (36 + 9 + 9) * 128);
  ImageHeader wrong_size = h;
  wrong_size.width = 41;
  EXPECT_NE(testing::message_of([&] { decode_jpeg(prog, wrong_size); }).find("40 x 40"),
            std::string::npos);
  ImageHeader single = h;
  single.jpeg_multi_scan = false;
  single.working_bytes = 0;
  EXPECT_NE(testing::message_of([&] { decode_jpeg(prog, single); }).find("libjpeg read a frame"),
            std::string::npos);
  // A header that promised less than the coefficients take: libjpeg stops at the cap (its
  // buffers plus a fixed slack) instead of allocating them.
  const std::vector<uint8_t> big =
      encode_jpeg(picture(3000, 3000, 3), {.h0 = 1, .v0 = 1, .progressive = true, .quality = 50});
  ImageHeader understated = *read_image_header(big);
  EXPECT_EQ(understated.working_bytes, 3 * 375 * 375 * 128);  // 54 MB, past the 32 MiB slack
  understated.working_bytes = 0;
  const std::string m = testing::message_of([&] { decode_jpeg(big, understated); });
  EXPECT_NE(m.find("needs more than the 32 MiB of working memory its header promised"),
            std::string::npos)
      << m;
  // A baseline file needs no coefficient buffers; one component per scan does.
  EXPECT_FALSE(read_image_header(encode_jpeg(picture(40, 40, 3), {}))->jpeg_multi_scan);
  EXPECT_TRUE(read_image_header(encode_jpeg(picture(40, 40, 3), {.scan_per_component = true}))
                  ->jpeg_multi_scan);
}

// A progressive JPEG keeps every coefficient until its last scan: a valid progressive CMYK
// 8192 x 8192 file peaked at 982 MB against the 256 MiB budget, which counted the image alone.
// The coefficients now count: 4 components x 1M blocks x 128 bytes.
TEST(Jpeg, ProgressiveCoefficientsCountAgainstTheBudget) {
  std::vector<uint8_t> jpeg = encode_jpeg(
      picture(16, 16, 4), {.jpeg_space = JCS_CMYK, .h0 = 1, .v0 = 1, .progressive = true});
  for (size_t at = 2; at + 9 < jpeg.size(); at += 2 + (size_t{jpeg[at + 2]} << 8 | jpeg[at + 3])) {
    if (jpeg[at + 1] == 0xC2) {  // SOF2: the frame header of a progressive file
      jpeg[at + 5] = jpeg[at + 7] = 0x20;
      jpeg[at + 6] = jpeg[at + 8] = 0x00;
      break;
    }
  }
  const auto h = read_image_header(jpeg);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->working_bytes, int64_t{4} << 27);
  EXPECT_EQ(h->decoded_bytes(), int64_t{8192} * 8192 * 3);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("vitpe_cmyk_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
  const std::string m = testing::message_of([&] { decode_image(path.string()); });
  std::filesystem::remove(path);
  EXPECT_NE(m.find("its JPEG header says 8192 x 8192 pixels of 8 bits, and its decoder holds a "
                   "progressive JPEG's coefficients of 4 components (512 MiB); decoding it could "
                   "take 704 MiB, more than the 256 MiB budget"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace vitpe
