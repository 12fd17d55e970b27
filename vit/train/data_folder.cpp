// ImageFolder: one subfolder per class (sorted names = class indices), images decoded with the
// checks of read_image, then either resized (bilinear, no crop) to the size and normalised with
// ImageNet's mean and std (for training), or rendered with a model's evaluation transform
// (DatasetOptions::transform, for `vitpe eval`). A root with train/ and test/ (or val/)
// subfolders gives the two splits; otherwise the root serves both.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "vit/io/preprocess.h"
#include "vit/train/data.h"
#include "vit/train/data_internal.h"

namespace vitpe {

namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".png" || e == ".jpg" || e == ".jpeg" || e == ".bmp" || e == ".webp" || e == ".tif" ||
         e == ".tiff" || e == ".ppm" || e == ".pgm";
}

class Folder : public Dataset {
 public:
  Folder(const std::string& root, bool train, int64_t rows, int64_t cols, int64_t limit,
         std::optional<Preprocess> transform)
      : root_(pick_split(root, train)),
        rows_(transform ? transform->rows
              : rows    ? rows
                        : 224),
        cols_(transform ? transform->cols
              : cols    ? cols
                        : 224),
        transform_(std::move(transform)) {
    if (transform_) transform_->validate();
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root_))
      if (e.is_directory()) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(d))
        if (e.is_regular_file() && is_image(e.path())) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        files_.push_back(f.string());
        targets_.push_back(static_cast<int32_t>(labels_.size()));
      }
      labels_.push_back(d.filename().string());
    }
    if (labels_.empty() || files_.empty()) {
      throw std::runtime_error(root_ +
                               ": an image folder needs one subfolder per class with "
                               "images in it (found " +
                               std::to_string(labels_.size()) + " subfolders, " +
                               std::to_string(files_.size()) + " images)");
    }
    // A limit keeps the first `limit` images of an interleaved order, so every class stays.
    if (limit > 0 && limit < static_cast<int64_t>(files_.size())) interleave_and_limit(limit);
  }

  std::string name() const override { return "folder"; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t classes() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t channels() const override { return transform_ ? transform_->channels : 3; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  std::vector<std::string> labels() const override { return labels_; }
  int64_t crop_padding() const override { return std::max<int64_t>(1, rows_ / 8); }
  int32_t flipped_label(int32_t label) const override { return label; }
  float pad_value(int64_t c) const override { return -mean()[c] / std_dev()[c]; }
  std::vector<float> mean() const override { return transform_ ? transform_->mean : kImageNetMean; }
  std::vector<float> std_dev() const override {
    return transform_ ? transform_->std_dev : kImageNetStd;
  }
  std::string other_size_rule() const override {
    if (!transform_) return "images resized bilinearly (no crop) to the size";
    std::ostringstream rule;
    rule << "the model's transform: " << interpolation_name(transform_->interpolation)
         << " resize to size / crop_pct " << transform_->crop_pct << " ("
         << crop_mode_name(transform_->crop_mode) << "), centre crop";
    return rule.str();
  }

  int32_t get(int64_t i, float* image) const override {
    check_index(*this, i);
    if (transform_) {
      preprocess_into(read_image(files_[i], transform_->channels), *transform_, image);
      return targets_[i];
    }
    // The same checked decoding as classify (format, size budget), as RGB.
    const cv::Mat rgb = read_image(files_[i], 3);
    cv::Mat resized;
    cv::resize(rgb, resized, cv::Size(static_cast<int>(cols_), static_cast<int>(rows_)), 0, 0,
               cv::INTER_LINEAR);
    const int64_t plane = rows_ * cols_;
    for (int64_t y = 0; y < rows_; ++y) {
      const uint8_t* row = resized.ptr<uint8_t>(static_cast<int>(y));
      for (int64_t x = 0; x < cols_; ++x) {
        for (int c = 0; c < 3; ++c) {
          float v = row[x * 3 + c] / 255.0f;
          image[c * plane + y * cols_ + x] = (v - kImageNetMean[c]) / kImageNetStd[c];
        }
      }
    }
    return targets_[i];
  }

 private:
  static std::string pick_split(const std::string& root, bool train) {
    if (!fs::is_directory(root)) {
      throw std::runtime_error(root + ": image folder not found (pass --data-dir DIR)");
    }
    for (const char* sub :
         train ? std::vector<const char*>{"train"} : std::vector<const char*>{"test", "val"}) {
      if (fs::is_directory(fs::path(root) / sub)) return (fs::path(root) / sub).string();
    }
    return root;
  }

  void interleave_and_limit(int64_t limit) {
    // Round-robin over classes in file order.
    std::vector<std::vector<size_t>> by_class(labels_.size());
    for (size_t i = 0; i < files_.size(); ++i) by_class[targets_[i]].push_back(i);
    std::vector<std::string> files;
    std::vector<int32_t> targets;
    for (size_t r = 0; static_cast<int64_t>(files.size()) < limit; ++r) {
      for (size_t c = 0; c < by_class.size() && static_cast<int64_t>(files.size()) < limit; ++c) {
        if (r < by_class[c].size()) {
          files.push_back(files_[by_class[c][r]]);
          targets.push_back(static_cast<int32_t>(c));
        }
      }
    }
    files_ = std::move(files);
    targets_ = std::move(targets);
  }

  std::string root_;
  int64_t rows_, cols_;
  std::optional<Preprocess> transform_;
  std::vector<std::string> labels_;
  std::vector<std::string> files_;
  std::vector<int32_t> targets_;
};

}  // namespace

std::unique_ptr<Dataset> make_folder(const DatasetOptions& o) {
  std::string root = o.dir;
  if (o.name.rfind("folder:", 0) == 0) root = o.name.substr(7);
  if (root.empty()) throw std::invalid_argument("dataset folder: pass the folder with --data-dir");
  return std::make_unique<Folder>(root, o.train, o.rows, o.cols, o.limit, o.transform);
}

}  // namespace vitpe
