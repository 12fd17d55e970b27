// libjpeg's compressor for the tests and the fuzz seeds: JPEGs of the kinds a decoder meets that
// cv::imencode cannot make (chroma sampling factors, CMYK and YCCK, one component per scan,
// custom progressive scripts, arithmetic coding), and surgery on their scans (a scan repeated,
// the scan bomb's recipe).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <opencv2/core.hpp>
#include <utility>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

namespace vitpe::testing {

struct JpegOptions {
  J_COLOR_SPACE jpeg_space = JCS_YCbCr;  // JCS_GRAYSCALE, JCS_YCbCr, JCS_RGB, JCS_CMYK, JCS_YCCK
  int h0 = 2, v0 = 2;                    // the first component's sampling factors (others 1)
  bool progressive = false;              // libjpeg's default progression
  bool scan_per_component = false;       // sequential, one component per scan (multi-scan)
  // A progressive script of one DC scan and one AC scan (Ss 1, Se 63), both at full precision:
  // the AC scan may be repeated without libjpeg's progression warning.
  bool dc_then_ac = false;
  bool arithmetic = false;
  int quality = 90;
  int restart_rows = 0;
};

// img: 8UC1 gray, 8UC3 RGB (in R, G, B order) or 8UC4 CMYK, continuous.
inline std::vector<uint8_t> encode_jpeg(const cv::Mat& img, const JpegOptions& o = {}) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);  // a test's own valid input: libjpeg's default exit on error
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(img.cols);
  c.image_height = static_cast<JDIMENSION>(img.rows);
  c.input_components = img.channels();
  c.in_color_space = img.channels() == 1 ? JCS_GRAYSCALE : img.channels() == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, o.jpeg_space);
  jpeg_set_quality(&c, o.quality, TRUE);
  c.comp_info[0].h_samp_factor = o.h0;
  c.comp_info[0].v_samp_factor = o.v0;
  for (int i = 1; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = 1;
  for (int i = 1; i < c.num_components; ++i) c.comp_info[i].v_samp_factor = 1;
  c.arith_code = o.arithmetic ? TRUE : FALSE;
  c.restart_in_rows = o.restart_rows;
  std::vector<jpeg_scan_info> script;
  if (o.progressive) jpeg_simple_progression(&c);
  if (o.scan_per_component) {
    for (int i = 0; i < c.num_components; ++i) script.push_back({1, {i, 0, 0, 0}, 0, 63, 0, 0});
  }
  if (o.dc_then_ac) {
    script.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
    script.push_back({1, {0, 0, 0, 0}, 1, 63, 0, 0});
  }
  if (!script.empty()) {
    c.scan_info = script.data();
    c.num_scans = static_cast<int>(script.size());
  }
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(img.ptr<uint8_t>(static_cast<int>(c.next_scanline)));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> bytes(out, out + size);
  std::free(out);
  return bytes;
}

// Where each scan lies: [start, end) from its SOS marker to the marker after its entropy data.
inline std::vector<std::pair<size_t, size_t>> jpeg_scans(const std::vector<uint8_t>& j) {
  std::vector<std::pair<size_t, size_t>> scans;
  size_t at = 2;
  while (at + 4 <= j.size() && j[at] == 0xFF) {
    const uint8_t marker = j[at + 1];
    if (marker == 0xD9) break;
    const size_t length = size_t{j[at + 2]} << 8 | j[at + 3];
    if (marker != 0xDA) {
      at += 2 + length;
      continue;
    }
    size_t end = at + 2 + length;  // entropy data: up to a marker other than FF00 and RSTn
    while (end + 1 < j.size() &&
           !(j[end] == 0xFF && j[end + 1] != 0 && !(j[end + 1] >= 0xD0 && j[end + 1] <= 0xD7))) {
      ++end;
    }
    scans.push_back({at, end});
    at = end;
  }
  return scans;
}

// The JPEG with scan `k` repeated `extra` more times after itself.
inline std::vector<uint8_t> repeat_scan(const std::vector<uint8_t>& j, size_t k, int extra) {
  const auto [begin, end] = jpeg_scans(j).at(k);
  std::vector<uint8_t> out(j.begin(), j.begin() + static_cast<std::ptrdiff_t>(end));
  for (int i = 0; i < extra; ++i) out.insert(out.end(), j.begin() + begin, j.begin() + end);
  out.insert(out.end(), j.begin() + static_cast<std::ptrdiff_t>(end), j.end());
  return out;
}

}  // namespace vitpe::testing
