// Fashion-MNIST from the IDX .gz files (read with zlib), validated, rendered at any size.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>

#include "vit/train/data.h"
#include "vit/train/data_internal.h"

namespace vitpe {

namespace {

// Reads the whole decompressed content of a .gz file.
std::vector<uint8_t> read_gz(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path +
                             ": file not found (Fashion-MNIST: install Debian's "
                             "dataset-fashion-mnist or pass --data-dir)");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1 << 16);
  for (;;) {
    int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw std::runtime_error(path + ": gzip error: " + msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  // A truncated gzip stream reads as a short EOF; zlib reports it through gzclose/gzerror.
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (err == Z_BUF_ERROR) {
    gzclose(f);
    throw std::runtime_error(path + ": truncated gzip stream (the file ends before the data)");
  }
  if (err != Z_OK && err != Z_STREAM_END) {
    std::string m = msg;
    gzclose(f);
    throw std::runtime_error(path + ": gzip error: " + m);
  }
  int rc = gzclose(f);
  if (rc == Z_BUF_ERROR) {
    throw std::runtime_error(path + ": truncated gzip stream (file ends before the data does)");
  }
  if (rc != Z_OK) throw std::runtime_error(path + ": gzip error on close");
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

}  // namespace

IdxArray read_idx_gz(const std::string& path, int expected_ndim) {
  std::vector<uint8_t> bytes = read_gz(path);
  if (bytes.size() < 4) {
    throw std::runtime_error(path + ": too short for an IDX header (" +
                             std::to_string(bytes.size()) + " bytes)");
  }
  // Magic: two zero bytes, the type code (0x08 = unsigned byte), the number of dimensions.
  uint32_t magic = be32(bytes.data());
  uint32_t expected_magic = 0x00000800u | static_cast<uint32_t>(expected_ndim);
  if (magic != expected_magic) {
    char buf[128];
    std::snprintf(buf, sizeof buf, ": bad IDX magic number 0x%08x, expected 0x%08x", magic,
                  expected_magic);
    throw std::runtime_error(path + buf + " (unsigned bytes, " + std::to_string(expected_ndim) +
                             " dimensions)");
  }
  size_t header = 4 + 4 * static_cast<size_t>(expected_ndim);
  if (bytes.size() < header) {
    throw std::runtime_error(path + ": truncated IDX header (" + std::to_string(bytes.size()) +
                             " bytes, expected at least " + std::to_string(header) + ")");
  }
  IdxArray a;
  // The element count, checked: dimensions of 2^31, 2^31 and 4 once multiplied (wrapping) to 0
  // and an empty file passed for 2^64 images' worth (found by fuzz_idx).
  size_t count = 1;
  bool overflow = false;
  for (int i = 0; i < expected_ndim; ++i) {
    a.dims.push_back(be32(bytes.data() + 4 + 4 * i));
    overflow |= __builtin_mul_overflow(count, static_cast<size_t>(a.dims.back()), &count);
  }
  if (overflow) count = SIZE_MAX;  // more than any file holds: reported as truncated below
  if (bytes.size() - header != count) {
    std::string dims;
    for (int64_t d : a.dims) {
      if (!dims.empty()) dims.push_back('x');
      dims.append(std::to_string(d));
    }
    throw std::runtime_error(path + ": IDX data has " + std::to_string(bytes.size() - header) +
                             " bytes, the header (" + dims + ") says " +
                             (overflow ? std::string("more than 2^64") : std::to_string(count)) +
                             (bytes.size() - header < count ? " (truncated file)" : ""));
  }
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

namespace {

class FashionMnist : public Dataset {
 public:
  FashionMnist(const std::string& dir, bool train, int64_t rows, int64_t cols, int64_t limit)
      : rows_(rows ? rows : 28), cols_(cols ? cols : 28) {
    std::string prefix = dir + "/" + (train ? "train" : "t10k");
    std::string img_path = prefix + "-images-idx3-ubyte.gz";
    std::string lbl_path = prefix + "-labels-idx1-ubyte.gz";
    images_ = read_idx_gz(img_path, 3);
    labels_ = read_idx_gz(lbl_path, 1);
    if (images_.dims[1] != 28 || images_.dims[2] != 28) {
      throw std::runtime_error(img_path + ": expected 28x28 images, found " +
                               std::to_string(images_.dims[1]) + "x" +
                               std::to_string(images_.dims[2]));
    }
    if (images_.dims[0] != labels_.dims[0]) {
      throw std::runtime_error(img_path + " has " + std::to_string(images_.dims[0]) +
                               " images but " + lbl_path + " has " +
                               std::to_string(labels_.dims[0]) + " labels");
    }
    for (size_t i = 0; i < labels_.data.size(); ++i) {
      if (labels_.data[i] >= 10) {
        throw std::runtime_error(lbl_path + ": label " + std::to_string(labels_.data[i]) +
                                 " at index " + std::to_string(i) + " is not in [0, 10)");
      }
    }
    size_ = images_.dims[0];
    if (limit > 0 && limit < size_) size_ = limit;
  }

  std::string name() const override { return "fashion-mnist"; }
  int64_t size() const override { return size_; }
  int64_t classes() const override { return 10; }
  int64_t channels() const override { return 1; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  std::vector<std::string> labels() const override { return kFashionMnistLabels; }
  int64_t crop_padding() const override { return 2; }
  // Clothes stay the same clothes when mirrored.
  int32_t flipped_label(int32_t label) const override { return label; }
  float pad_value(int64_t) const override { return -kFashionMnistMean / kFashionMnistStd; }
  std::vector<float> mean() const override { return {kFashionMnistMean}; }
  std::vector<float> std_dev() const override { return {kFashionMnistStd}; }
  std::string other_size_rule() const override {
    return "test images resized bilinearly to the size";
  }

  int32_t get(int64_t i, float* image) const override {
    check_index(*this, i);
    const uint8_t* src = images_.data.data() + i * 28 * 28;
    const float scale = 1.0f / (255.0f * kFashionMnistStd);
    const float shift = -kFashionMnistMean / kFashionMnistStd;
    if (rows_ == 28 && cols_ == 28) {
      for (int64_t k = 0; k < 28 * 28; ++k) image[k] = src[k] * scale + shift;
    } else {
      // Bilinear resize of the whole image (in float, so no extra rounding to bytes).
      cv::Mat in(28, 28, CV_8UC1, const_cast<uint8_t*>(src));
      cv::Mat inf;
      in.convertTo(inf, CV_32F, scale, shift);
      cv::Mat out(static_cast<int>(rows_), static_cast<int>(cols_), CV_32FC1, image);
      cv::resize(inf, out, out.size(), 0, 0, cv::INTER_LINEAR);
    }
    return labels_.data[i];
  }

 private:
  IdxArray images_, labels_;
  int64_t size_ = 0;
  int64_t rows_, cols_;
};

}  // namespace

std::string default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

std::unique_ptr<Dataset> make_fashion_mnist(const DatasetOptions& o) {
  std::string dir = o.dir.empty() ? default_fashion_mnist_dir() : o.dir;
  return std::make_unique<FashionMnist>(dir, o.train, o.rows, o.cols, o.limit);
}

}  // namespace vitpe
