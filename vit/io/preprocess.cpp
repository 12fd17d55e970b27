// timm's evaluation transform on uint8 images, reproducing PIL's resampling. See
// vit/io/preprocess.h for the steps and where PIL/timm are followed to the bit.
#include "vit/io/preprocess.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <optional>
#include <stdexcept>

#include "vit/io/decode_budget.h"
#include "vit/io/image_header.h"
#include "vit/io/jpeg.h"

namespace vitpe {

namespace {

// ---- PIL's resampling (libImaging/Resample.c), 8 bits per channel ----------------------------

// Fixed-point precision of the coefficients: 8 bits of pixel, 2 of headroom for the filters'
// negative lobes and overshoot.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic with a = -0.5 (PIL's choice; PyTorch's non-antialiased bicubic uses -0.75).
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Per output pixel: the first input pixel, the number of inputs and their fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;  // [out_size, ksize]
};

// precompute_coeffs + normalize_coeffs_8bpc, in the same double arithmetic as PIL so that the
// rounded integer weights are identical.
Coeffs precompute_coeffs(int in_size, int out_size, Interpolation interp) {
  double (*filter)(double) = interp == Interpolation::bicubic ? bicubic_filter : bilinear_filter;
  const double filter_support = interp == Interpolation::bicubic ? 2.0 : 1.0;

  double scale = static_cast<double>(in_size) / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;  // antialias when shrinking
  double support = filter_support * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    double center = (xx + 0.5) * scale;
    double ww = 0.0;
    double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      w[x] = filter((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[static_cast<size_t>(xx) * c.ksize + x] =
          v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t clip8(int64_t acc) {
  int64_t v = acc >> kPrecisionBits;  // arithmetic shift: floor, as PIL's lookup table
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One pass along the columns (horizontal) of every row.
cv::Mat resample_horizontal(const cv::Mat& in, int out_w, Interpolation interp) {
  const int ch = in.channels();
  Coeffs c = precompute_coeffs(in.cols, out_w, interp);
  cv::Mat out(in.rows, out_w, in.type());
  for (int y = 0; y < in.rows; ++y) {
    const uint8_t* src = in.ptr<uint8_t>(y);
    uint8_t* dst = out.ptr<uint8_t>(y);
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
      const uint8_t* s = src + static_cast<size_t>(c.first[xx]) * ch;
      for (int b = 0; b < ch; ++b) {
        int64_t acc = 1 << (kPrecisionBits - 1);  // rounds the final shift to nearest
        for (int x = 0; x < c.count[xx]; ++x) acc += static_cast<int64_t>(s[x * ch + b]) * k[x];
        dst[xx * ch + b] = clip8(acc);
      }
    }
  }
  return out;
}

// One pass along the rows (vertical) of every column.
cv::Mat resample_vertical(const cv::Mat& in, int out_h, Interpolation interp) {
  const int ch = in.channels();
  const int row_len = in.cols * ch;
  Coeffs c = precompute_coeffs(in.rows, out_h, interp);
  cv::Mat out(out_h, in.cols, in.type());
  std::vector<int64_t> acc(row_len);
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &c.k[static_cast<size_t>(yy) * c.ksize];
    std::fill(acc.begin(), acc.end(), int64_t{1} << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[yy]; ++y) {
      const uint8_t* src = in.ptr<uint8_t>(c.first[yy] + y);
      for (int i = 0; i < row_len; ++i) acc[i] += static_cast<int64_t>(src[i]) * k[y];
    }
    uint8_t* dst = out.ptr<uint8_t>(yy);
    for (int i = 0; i < row_len; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

// Python's round(): half to even (the default floating-point rounding mode).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

// ---------------------------------------------------------------------------------------------

Preprocess Preprocess::from(const ModelConfig& config) {
  Preprocess p;
  p.rows = static_cast<int>(config.img_rows);
  p.cols = static_cast<int>(config.img_cols);
  p.crop_pct = config.preprocess.crop_pct;
  p.crop_mode = config.preprocess.crop_mode;
  p.interpolation = config.preprocess.interpolation;
  p.mean = config.preprocess.mean;
  p.std_dev = config.preprocess.std_dev;
  p.channels = static_cast<int>(config.channels);
  p.validate();
  return p;
}

void Preprocess::validate() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument("preprocess: " + what); };
  if (rows <= 0 || cols <= 0) {
    bad("expected a positive output size, found " + std::to_string(rows) + "x" +
        std::to_string(cols));
  }
  if (channels != 1 && channels != 3) {
    bad("expected 1 or 3 channels, found " + std::to_string(channels));
  }
  // The same ranges as a model config's, whatever the source of the numbers.
  PreprocessConfig{crop_pct, crop_mode, interpolation, mean, std_dev}.validate(channels,
                                                                               "preprocess");
}

namespace {

// An OpenCV depth as messages name it.
std::string depth_name(int depth) {
  switch (depth) {
    case CV_8U:
      return "8-bit unsigned";
    case CV_8S:
      return "8-bit signed";
    case CV_16U:
      return "16-bit unsigned";
    case CV_16S:
      return "16-bit signed";
    case CV_32S:
      return "32-bit signed integer";
    case CV_32F:
      return "32-bit float";
    case CV_64F:
      return "64-bit float";
    case CV_16F:
      return "16-bit float";
    default:
      return "OpenCV depth " + std::to_string(depth);
  }
}

}  // namespace

cv::Mat to_uint8_channels(const cv::Mat& decoded, int channels, const std::string& source) {
  if (decoded.empty()) {
    throw std::runtime_error("image '" + source + "': empty image");
  }
  if (decoded.dims != 2) {
    throw std::invalid_argument("image '" + source +
                                "': expected a 2-D image (rows x cols with 1 to 4 channels), "
                                "found " +
                                std::to_string(decoded.dims) + " dimensions");
  }
  if (channels != 1 && channels != 3) {
    throw std::invalid_argument("image '" + source + "': expected 1 or 3 output channels, found " +
                                std::to_string(channels));
  }
  cv::Mat u8;
  if (decoded.depth() == CV_8U) {
    u8 = decoded;
  } else if (decoded.depth() == CV_16U) {
    // v >> 8 (PIL keeps the high byte of 16-bit samples). convertTo(scale 1/256) would round.
    u8.create(decoded.size(), CV_MAKETYPE(CV_8U, decoded.channels()));
    for (int y = 0; y < decoded.rows; ++y) {
      const uint16_t* s = decoded.ptr<uint16_t>(y);
      uint8_t* d = u8.ptr<uint8_t>(y);
      for (int i = 0; i < decoded.cols * decoded.channels(); ++i)
        d[i] = static_cast<uint8_t>(s[i] >> 8);
    }
  } else {
    throw std::runtime_error("image '" + source +
                             "': expected 8- or 16-bit unsigned samples, found " +
                             depth_name(decoded.depth()) + " samples");
  }

  const int in_ch = u8.channels();
  if (in_ch < 1 || in_ch > 4) {
    throw std::runtime_error("image '" + source + "': expected 1 to 4 channels, found " +
                             std::to_string(in_ch));
  }
  const bool gray = in_ch <= 2;  // gray or gray + alpha
  cv::Mat out(u8.rows, u8.cols, CV_MAKETYPE(CV_8U, channels));
  for (int y = 0; y < u8.rows; ++y) {
    const uint8_t* s = u8.ptr<uint8_t>(y);
    uint8_t* d = out.ptr<uint8_t>(y);
    for (int x = 0; x < u8.cols; ++x, s += in_ch) {
      if (gray) {
        for (int c = 0; c < channels; ++c) d[x * channels + c] = s[0];
      } else if (channels == 3) {
        d[3 * x + 0] = s[2];  // OpenCV decodes BGR(A); alpha is dropped, not composited
        d[3 * x + 1] = s[1];
        d[3 * x + 2] = s[0];
      } else {
        // PIL's convert('L'): ITU-R 601-2 luma in 16-bit fixed point.
        d[x] = static_cast<uint8_t>((s[2] * 19595 + s[1] * 38470 + s[0] * 7471 + 0x8000) >> 16);
      }
    }
  }
  return out;
}

namespace {

// A decoded image with its share of the decode budget, held until the image is preprocessed.
struct DecodedImage {
  cv::Mat mat;
  DecodeBudget::Hold hold;
};

std::string mib_rounded_up(int64_t bytes) {
  return std::to_string(bytes / (1 << 20) + (bytes % (1 << 20) != 0 ? 1 : 0));
}

DecodedImage decode_held(const std::string& path, int64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::runtime_error(
        "image '" + path +
        "': " + (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  }
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error("image '" + path + "': cannot read its size: " + ec.message());
  if (file_size > static_cast<uintmax_t>(max_bytes)) {
    throw std::runtime_error("image '" + path + "': " + mib_rounded_up(file_size) +
                             " MiB, larger than any image vitpe decodes (" +
                             mib_rounded_up(max_bytes) + " MiB)");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(file_size));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
    throw std::runtime_error("image '" + path + "': cannot read it");
  }
  std::optional<ImageHeader> header;
  try {
    header = read_image_header(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error("image '" + path + "': " + e.what());
  }
  if (!header) {
    std::string first;
    for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i) {
      static const char* hex = "0123456789abcdef";
      first += std::string(i ? " " : "") + hex[bytes[i] >> 4] + hex[bytes[i] & 15];
    }
    throw std::runtime_error(
        "image '" + path + "': not a PNG, JPEG, BMP, WebP, TIFF or PNM file (it starts with " +
        (bytes.empty() ? std::string("nothing: the file is empty") : "bytes " + first) + ")");
  }
  if (const int64_t need = header->budget_bytes(); need > max_bytes) {
    std::string what = std::to_string(header->width) + " x " + std::to_string(header->height) +
                       " pixels of " + std::to_string(header->bits) + " bits";
    if (header->working_bytes > 0) {
      what += ", and its decoder holds " + header->working + " (" +
              mib_rounded_up(header->working_bytes) + " MiB)";
    }
    const int64_t per_pixel = header->channels * (header->bits > 8 ? 2 : 1);
    throw std::runtime_error(
        "image '" + path + "': its " + header->format + " header says " + what +
        "; decoding it could take " + mib_rounded_up(need) + " MiB, more than the " +
        mib_rounded_up(max_bytes) + " MiB budget" +
        (header->working_bytes > 0
             ? std::string()
             : " (about " + std::to_string(max_bytes / per_pixel / 1000000) + " megapixels)"));
  }
  DecodeBudget::Hold hold = DecodeBudget::shared().reserve(header->budget_bytes());
  cv::Mat decoded;
  try {
    decoded = header->format == "JPEG" ? decode_jpeg(bytes, *header)
                                       : cv::imdecode(bytes, cv::IMREAD_UNCHANGED);
  } catch (const cv::Exception& e) {
    throw std::runtime_error("image '" + path + "': cannot decode: " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("image '" + path + "': " + e.what());
  }
  if (decoded.empty()) {
    throw std::runtime_error("image '" + path + "': cannot decode its " + header->format +
                             " data (corrupt or an unsupported variant)");
  }
  // The decoder read the size from the same header; a disagreement means the check above did
  // not bound this decode.
  if (decoded.cols != header->width || decoded.rows != header->height) {
    throw std::runtime_error("image '" + path + "': decoded as " + std::to_string(decoded.cols) +
                             " x " + std::to_string(decoded.rows) + ", but its header says " +
                             std::to_string(header->width) + " x " +
                             std::to_string(header->height));
  }
  return DecodedImage{std::move(decoded), std::move(hold)};
}

}  // namespace

cv::Mat decode_image(const std::string& path) {
  return decode_held(path, kMaxDecodedImageBytes).mat;
}

cv::Mat decode_image(const std::string& path, int64_t max_bytes) {
  if (max_bytes <= 0 || max_bytes > kMaxDecodedImageBytes) {
    throw std::invalid_argument("decode_image: expected a budget of 1 to " +
                                std::to_string(kMaxDecodedImageBytes) + " bytes, found " +
                                std::to_string(max_bytes));
  }
  return decode_held(path, max_bytes).mat;
}

bool has_image_extension(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".png" || e == ".jpg" || e == ".jpeg" || e == ".bmp" || e == ".webp" || e == ".tif" ||
         e == ".tiff" || e == ".ppm" || e == ".pgm";
}

const char* image_extensions_text() { return "png, jpg, jpeg, bmp, webp, tif, tiff, ppm, pgm"; }

cv::Mat read_image(const std::string& path, int channels) {
  const DecodedImage d = decode_held(path, kMaxDecodedImageBytes);
  return to_uint8_channels(d.mat, channels, path);
}

cv::Mat pil_resize(const cv::Mat& img, int width, int height, Interpolation interp) {
  if (img.depth() != CV_8U || img.channels() < 1 || img.channels() > 4) {
    throw std::invalid_argument("pil_resize: expected a uint8 image with 1 to 4 channels");
  }
  if (width <= 0 || height <= 0) {
    throw std::invalid_argument("pil_resize: expected a positive size, found " +
                                std::to_string(width) + "x" + std::to_string(height));
  }
  cv::Mat out = img;
  // Pillow (>= 13): each pass only when that side changes, the horizontal first unless the height
  // shrinks by more than twice what the width does; the passes round to uint8 in between, so the
  // order shows in the last bit (a tall random-resized crop, 17x33 -> 32x32, goes vertical first).
  const int shrink_h = img.rows - height, shrink_w = img.cols - width;
  if (shrink_h > 0 && shrink_h > 2 * shrink_w) {
    out = resample_vertical(out, height, interp);
    if (width != img.cols) out = resample_horizontal(out, width, interp);
  } else {
    if (width != img.cols) out = resample_horizontal(out, width, interp);
    if (height != img.rows) out = resample_vertical(out, height, interp);
  }
  return out.data == img.data ? img.clone() : out;
}

cv::Size resized_size(int width, int height, const Preprocess& cfg) {
  // timm: math.floor(size / crop_pct). The 1e-9 keeps a crop_pct written as a ratio (224 / 232,
  // torchvision's Swin-T) from flooring to 231 where the division lands just below 232.
  const double target_h = std::floor(cfg.rows / cfg.crop_pct + 1e-9);
  const double target_w = std::floor(cfg.cols / cfg.crop_pct + 1e-9);
  if (cfg.crop_mode == CropMode::squash) {
    return cv::Size(static_cast<int>(target_w), static_cast<int>(target_h));
  }
  if (target_h == target_w) {
    // timm then uses torchvision Resize(int): shorter side -> s, longer -> int(s * long / short).
    const int s = static_cast<int>(target_h);
    const int short_side = std::min(width, height), long_side = std::max(width, height);
    const int new_long = static_cast<int>(static_cast<double>(s) * long_side / short_side);
    return width <= height ? cv::Size(s, new_long) : cv::Size(new_long, s);
  }
  // timm ResizeKeepRatio(longest=0): scale by the smaller of the two ratios.
  const double ratio = std::min(height / target_h, width / target_w);
  return cv::Size(round_half_even(width / ratio), round_half_even(height / ratio));
}

cv::Mat resize_and_crop(const cv::Mat& img, const Preprocess& cfg) {
  cfg.validate();
  const cv::Size size = resized_size(img.cols, img.rows, cfg);
  if (size.width <= 0 || size.height <= 0) {
    throw std::invalid_argument("preprocess: a " + std::to_string(img.cols) + "x" +
                                std::to_string(img.rows) + " image resizes to nothing");
  }
  // The pixel budget: timm scales the short side to the target, so a thin image (a 97-byte
  // 1x8192 PNG) would become a gigapixel strip before its centre crop.
  constexpr double kMaxResizedPixels = 1 << 24;
  if (static_cast<double>(size.width) * size.height > kMaxResizedPixels) {
    throw std::invalid_argument(
        "preprocess: a " + std::to_string(img.cols) + "x" + std::to_string(img.rows) +
        " image would be resized to " + std::to_string(size.width) + "x" +
        std::to_string(size.height) + " before the centre crop, past the budget of " +
        std::to_string(static_cast<int64_t>(kMaxResizedPixels)) +
        " pixels: its aspect ratio is too extreme for timm's resize-then-crop");
  }
  cv::Mat resized =
      size == img.size() ? img : pil_resize(img, size.width, size.height, cfg.interpolation);

  // torchvision center_crop: zero-pad (left/top get the smaller half) when too small.
  if (resized.cols < cfg.cols || resized.rows < cfg.rows) {
    const int pw = std::max(0, cfg.cols - resized.cols), ph = std::max(0, cfg.rows - resized.rows);
    cv::Mat padded(resized.rows + ph, resized.cols + pw, resized.type(), cv::Scalar::all(0));
    resized.copyTo(padded(cv::Rect(pw / 2, ph / 2, resized.cols, resized.rows)));
    resized = padded;
  }
  const int top = round_half_even((resized.rows - cfg.rows) / 2.0);
  const int left = round_half_even((resized.cols - cfg.cols) / 2.0);
  return resized(cv::Rect(left, top, cfg.cols, cfg.rows)).clone();
}

namespace {

void check_channels(const cv::Mat& img, const Preprocess& cfg) {
  if (img.dims != 2 || img.depth() != CV_8U || img.channels() != cfg.channels) {
    throw std::invalid_argument(
        "preprocess: expected a 2-D uint8 image with " + std::to_string(cfg.channels) +
        " channels, found " + std::to_string(img.dims) + " dimensions, " +
        std::to_string(img.channels()) + " channels of " + depth_name(img.depth()) + " samples");
  }
}

// Step 4 on a uint8 rows x cols image.
void normalise_into(const cv::Mat& img, const Preprocess& cfg, float* out) {
  const int C = cfg.channels;
  const size_t plane = static_cast<size_t>(cfg.rows) * cfg.cols;
  for (int y = 0; y < cfg.rows; ++y) {
    const uint8_t* s = img.ptr<uint8_t>(y);
    for (int x = 0; x < cfg.cols; ++x) {
      for (int c = 0; c < C; ++c) {
        // The same f32 operations as ToTensor (v / 255) and Normalize ((x - mean) / std).
        const float v = static_cast<float>(s[x * C + c]) / 255.0f;
        out[c * plane + static_cast<size_t>(y) * cfg.cols + x] = (v - cfg.mean[c]) / cfg.std_dev[c];
      }
    }
  }
}

}  // namespace

void preprocess_into(const cv::Mat& img, const Preprocess& cfg, float* out) {
  cfg.validate();
  check_channels(img, cfg);
  normalise_into(resize_and_crop(img, cfg), cfg, out);
}

void check_crop_box(const CropBox& box, int64_t width, int64_t height, const char* what) {
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 ||
      box.top > height - box.height || box.left > width - box.width) {
    throw std::invalid_argument("resized crop: the box " + std::to_string(box.width) + "x" +
                                std::to_string(box.height) + " at (" + std::to_string(box.left) +
                                ", " + std::to_string(box.top) + ") is not inside the " +
                                std::to_string(width) + "x" + std::to_string(height) + " " + what);
  }
}

void resized_crop_into(const cv::Mat& img, const CropBox& box, bool flip, const Preprocess& cfg,
                       float* out) {
  cfg.validate();
  check_channels(img, cfg);
  check_crop_box(box, img.cols, img.rows, "image");
  const cv::Mat crop = img(cv::Rect(box.left, box.top, box.width, box.height));
  // pil_resize copies a crop that already has the size unfiltered, as PIL does.
  cv::Mat resized = pil_resize(crop, cfg.cols, cfg.rows, cfg.interpolation);
  if (flip) cv::flip(resized, resized, 1);
  normalise_into(resized, cfg, out);
}

Tensor preprocess_image(const cv::Mat& img, const Preprocess& cfg) {
  cfg.validate();
  Tensor t = Tensor::empty({cfg.channels, cfg.rows, cfg.cols});
  preprocess_into(img, cfg, t.f32());
  return t;
}

Tensor preprocess_file(const std::string& path, const Preprocess& cfg) {
  cfg.validate();
  const DecodedImage d = decode_held(path, kMaxDecodedImageBytes);
  return preprocess_image(to_uint8_channels(d.mat, cfg.channels, path), cfg);
}

Tensor preprocess_files(const std::vector<std::string>& paths, const Preprocess& cfg,
                        std::vector<std::string>* errors) {
  cfg.validate();
  const int64_t B = static_cast<int64_t>(paths.size());
  Tensor batch = Tensor::zeros({B, cfg.channels, cfg.rows, cfg.cols});
  const size_t per_image = static_cast<size_t>(cfg.channels) * cfg.rows * cfg.cols;
  std::vector<std::string> messages(paths.size());
  float* base = batch.f32();
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < B; ++i) {
    try {
      const DecodedImage d = decode_held(paths[i], kMaxDecodedImageBytes);
      preprocess_into(to_uint8_channels(d.mat, cfg.channels, paths[i]), cfg, base + i * per_image);
    } catch (const std::exception& e) {
      messages[i] = e.what();
      std::fill(base + i * per_image, base + (i + 1) * per_image, 0.0f);
    }
  }
  if (errors != nullptr) {
    *errors = std::move(messages);
  } else {
    for (const std::string& m : messages) {
      if (!m.empty()) throw std::runtime_error(m);
    }
  }
  return batch;
}

}  // namespace vitpe
