// libjpeg decoding with warnings as errors, a scan limit and a memory limit (vit/io/jpeg.h).
//
// libjpeg reports errors through a callback that must not return; the callbacks here longjmp
// back to the stage that called libjpeg. Each stage below holds only plain data (no object with
// a destructor lives across a setjmp), as longjmp requires in C++.
#include "vit/io/jpeg.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

namespace vitpe {

namespace {

// Memory libjpeg may use beyond the coefficient buffers the header check counted: its row
// buffers, tables and upsampling context, a few MB even at 65535 pixels across.
constexpr int64_t kLibjpegSlack = int64_t{32} << 20;

struct Decoder {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool created = false;
  bool multiple_scans = false;  // the frame needs libjpeg's whole-image coefficient buffers
};

Decoder& decoder_of(j_common_ptr c) { return *static_cast<Decoder*>(c->client_data); }

[[noreturn]] void on_error(j_common_ptr c) {
  Decoder& d = decoder_of(c);
  (*c->err->format_message)(c, d.message);
  std::longjmp(d.jump, 1);
}

// Level -1 is a warning: the data is corrupt or cut short, and libjpeg would go on with gray
// where it is missing. Levels 0 and up are traces.
void on_message(j_common_ptr c, int level) {
  if (level < 0) on_error(c);
}

// Called as each scan is read (per row of blocks): refuses the scan past the limit.
void on_progress(j_common_ptr c) {
  auto* cinfo = reinterpret_cast<j_decompress_ptr>(c);
  if (cinfo->input_scan_number > kMaxJpegScans) {
    Decoder& d = decoder_of(c);
    d.err.msg_code = 0;
    std::snprintf(d.message, sizeof d.message,
                  "more than %d scans (a progressive JPEG has about 10; each scan is a pass over "
                  "the whole image)",
                  kMaxJpegScans);
    std::longjmp(d.jump, 1);
  }
}

// ---- the stages: each returns false after a libjpeg error, its text in d.message -------------

bool create(Decoder& d, const uint8_t* data, size_t size, long max_memory) {
  if (setjmp(d.jump)) return false;
  jpeg_create_decompress(&d.cinfo);  // clears everything but err and client_data
  d.created = true;
  d.cinfo.progress = &d.progress;
  d.cinfo.mem->max_memory_to_use = max_memory;
  jpeg_mem_src(&d.cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo, TRUE);
  d.multiple_scans = jpeg_has_multiple_scans(&d.cinfo);
  return true;
}

// Rows go straight into `out` (gray, BGR) or through `cmyk_row` (4 bytes a pixel), converted as
// OpenCV's icvCvt_CMYK2BGR_8u_C4C3R does: an Adobe (inverted) CMYK sample s with black k gives
// k - (255 - s) * k / 256 in integers.
bool decompress(Decoder& d, uint8_t* out, size_t step, uint8_t* cmyk_row) {
  if (setjmp(d.jump)) return false;
  jpeg_start_decompress(&d.cinfo);
  const JDIMENSION width = d.cinfo.output_width;
  while (d.cinfo.output_scanline < d.cinfo.output_height) {
    uint8_t* dst = out + d.cinfo.output_scanline * step;
    JSAMPROW row = cmyk_row != nullptr ? cmyk_row : dst;
    // The memory source never suspends (past the end it warns, which is an error here), so a
    // call reads one row.
    jpeg_read_scanlines(&d.cinfo, &row, 1);
    if (cmyk_row == nullptr) continue;
    for (JDIMENSION x = 0; x < width; ++x) {
      const int c = cmyk_row[4 * x], m = cmyk_row[4 * x + 1], y = cmyk_row[4 * x + 2];
      const int k = cmyk_row[4 * x + 3];
      dst[3 * x + 0] = static_cast<uint8_t>(k - ((255 - y) * k >> 8));
      dst[3 * x + 1] = static_cast<uint8_t>(k - ((255 - m) * k >> 8));
      dst[3 * x + 2] = static_cast<uint8_t>(k - ((255 - c) * k >> 8));
    }
  }
  jpeg_finish_decompress(&d.cinfo);
  return true;
}

void destroy(Decoder& d) {
  if (d.created) jpeg_destroy_decompress(&d.cinfo);
  d.created = false;
}

// Frees libjpeg's memory on every way out of decode_jpeg.
struct Destroy {
  Decoder& d;
  ~Destroy() { destroy(d); }
};

}  // namespace

cv::Mat decode_jpeg(std::span<const uint8_t> bytes, const ImageHeader& header) {
  Decoder d{};
  Destroy destroy_at_exit{d};
  d.cinfo.err = jpeg_std_error(&d.err);
  d.err.error_exit = on_error;
  d.err.emit_message = on_message;
  d.cinfo.client_data = &d;
  d.progress.progress_monitor = on_progress;
  auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error("cannot decode its JPEG data: " + what);
  };
  const int64_t max_memory = header.working_bytes + kLibjpegSlack;
  if (!create(d, bytes.data(), bytes.size(), static_cast<long>(max_memory))) fail(d.message);

  // The frame libjpeg read must be the one the budget was reserved for.
  const jpeg_decompress_struct& c = d.cinfo;
  const int channels = c.num_components == 1 ? 1 : 3;
  if (c.image_width != header.width || c.image_height != header.height ||
      channels != header.channels || (d.multiple_scans && !header.jpeg_multi_scan)) {
    fail("libjpeg read a frame of " + std::to_string(c.image_width) + " x " +
         std::to_string(c.image_height) + " pixels and " + std::to_string(c.num_components) +
         " components, but the header check read " + std::to_string(header.width) + " x " +
         std::to_string(header.height) + (header.jpeg_multi_scan ? " (multi-scan)" : ""));
  }
  // OpenCV's choices for IMREAD_UNCHANGED: gray for one component, CMYK for four, else BGR
  // (libjpeg's colour conversion gives the same values as its RGB that OpenCV swaps).
  d.cinfo.out_color_space = c.num_components == 1   ? JCS_GRAYSCALE
                            : c.num_components == 4 ? JCS_CMYK
                                                    : JCS_EXT_BGR;
  cv::Mat out(static_cast<int>(header.height), static_cast<int>(header.width),
              channels == 1 ? CV_8UC1 : CV_8UC3);
  std::vector<uint8_t> cmyk_row(c.num_components == 4 ? 4 * static_cast<size_t>(c.image_width) : 0);
  if (!decompress(d, out.data, out.step, cmyk_row.empty() ? nullptr : cmyk_row.data())) {
    if (d.err.msg_code == JERR_NO_BACKING_STORE) {
      fail("it needs more than the " + std::to_string(max_memory >> 20) +
           " MiB of working memory its header promised");
    }
    fail(d.message);
  }
  return out;
}

}  // namespace vitpe
