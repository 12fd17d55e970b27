// ImageFolder: one subfolder per class (sorted names = class indices), images decoded with the
// checks of read_image, then either rendered with a model's evaluation transform
// (DatasetOptions::transform: what `vitpe eval` and `vitpe train` pass), with timm's training
// transform from it for the augmented samples of a training split (DatasetOptions::random_crop),
// or, without a transform, resized (bilinear, no crop) to the size and normalised with
// ImageNet's mean and std. A root with train/ and test/ (or val/)
// subfolders gives the two splits; otherwise the root serves both.
//
// What the folder must hold, checked when it is opened (before any training): at least two
// class folders; in the training split, at least one image in each (torchvision's ImageFolder
// refuses empty classes too); and no entry that would be read but cannot be resolved: a broken
// symbolic link and one in a loop are both refused, listed, rather than the dataset silently
// losing images or a whole class. Class names are the folder names with bytes that are not
// UTF-8 escaped (utf8_safe), as they go into JSON (the model's config, reports).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include "ops/util.h"
#include "vit/io/preprocess.h"
#include "vit/train/data.h"
#include "vit/train/data_internal.h"

namespace vitpe {

namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) { return has_image_extension(p.string()); }

class Folder : public Dataset {
 public:
  Folder(const std::string& root, bool train, int64_t rows, int64_t cols, int64_t limit,
         std::optional<Preprocess> transform, std::optional<RandomResizedCrop> random_crop)
      : root_(pick_split(root, train)),
        rows_(transform ? transform->rows
              : rows    ? rows
                        : 224),
        cols_(transform ? transform->cols
              : cols    ? cols
                        : 224),
        transform_(std::move(transform)),
        random_crop_(random_crop) {
    if (transform_) transform_->validate();
    if (random_crop_) {
      if (!transform_) {
        throw std::invalid_argument("folder: a random-resized crop needs the model's transform");
      }
      random_crop_->validate();
    }
    scan(train);
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
  bool augments_itself() const override { return random_crop_.has_value(); }

  // timm's training transform: the crop box and the flip drawn in its order, from the decoded
  // image at its own size.
  int32_t get_augmented(int64_t i, uint64_t seed, bool flip, float* image) const override {
    check_index(*this, i);
    if (!random_crop_) return Dataset::get_augmented(i, seed, flip, image);
    const cv::Mat img = read_image(files_[i], transform_->channels);
    Rng rng(seed);
    const CropBox box = sample_crop_box(img.cols, img.rows, *random_crop_, rng);
    const bool flipped = rng.uniform() < 0.5;
    resized_crop_into(img, box, flip && flipped, *transform_, image);
    return targets_[i];
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

  // Entries that would be read but whose type cannot be told (a broken link, a loop), as
  // "path (reason)", and how many there are.
  struct Unreadable {
    std::vector<std::string> first;
    int64_t count = 0;
    void add(const fs::directory_entry& e, const std::error_code& ec) {
      if (first.size() < 3) {
        first.push_back(e.path().string() + (e.is_symlink() ? " (a symbolic link: " : " (") +
                        ec.message() + ")");
      }
      ++count;
    }
  };

  // The entries of a directory, sorted; an entry whose status cannot be read goes to `bad`
  // when keep(entry) says it would have been read.
  template <class Keep>
  static std::vector<fs::directory_entry> entries(const fs::path& dir, Unreadable& bad,
                                                  Keep&& keep) {
    std::vector<fs::directory_entry> out;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) throw std::runtime_error(dir.string() + ": cannot be listed (" + ec.message() + ")");
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) out.push_back(*it);
    if (ec) throw std::runtime_error(dir.string() + ": cannot be listed (" + ec.message() + ")");
    std::sort(out.begin(), out.end());
    std::vector<fs::directory_entry> readable;
    for (const fs::directory_entry& e : out) {
      std::error_code st;
      const fs::file_status s = e.status(st);
      if (st || s.type() == fs::file_type::not_found || s.type() == fs::file_type::none) {
        if (keep(e))
          bad.add(e, st ? st : std::make_error_code(std::errc::no_such_file_or_directory));
        continue;
      }
      readable.push_back(e);
    }
    return readable;
  }

  // Lists the class folders and their images (see the top of the file for what is refused).
  void scan(bool train) {
    Unreadable bad;
    // At the root every entry may be a class folder; in a class folder, the image files.
    const std::vector<fs::directory_entry> top =
        entries(root_, bad, [](const auto&) { return true; });
    std::vector<std::string> empty;
    for (const fs::directory_entry& d : top) {
      if (!d.is_directory()) continue;
      int64_t others = 0, images = 0;
      for (const fs::directory_entry& e :
           entries(d.path(), bad, [](const auto& e) { return is_image(e.path()); })) {
        if (!e.is_regular_file() || !is_image(e.path())) {
          ++others;
          continue;
        }
        files_.push_back(e.path().string());
        targets_.push_back(static_cast<int32_t>(labels_.size()));
        ++images;
      }
      labels_.push_back(utf8_safe(d.path().filename().string()));
      if (images == 0) {
        empty.push_back(labels_.back() + (others == 0 ? ""
                                          : others == 1
                                              ? " (1 other entry)"
                                              : " (" + std::to_string(others) + " other entries)"));
      }
    }
    if (bad.count > 0) {
      throw std::runtime_error(
          root_ + ": " + std::to_string(bad.count) +
          (bad.count == 1 ? " entry cannot be read: " : " entries cannot be read: ") +
          join(bad.first, ", ") + (bad.count > 3 ? ", ..." : "") +
          "; a broken symbolic link or one in a loop is refused rather than skipped (the set "
          "would silently lose images): remove or fix it");
    }
    if (labels_.size() < 2 || files_.empty()) {
      throw std::runtime_error(root_ +
                               ": an image folder needs at least two subfolders (one per class) "
                               "with images in them (found " +
                               std::to_string(labels_.size()) + " subfolders, " +
                               std::to_string(files_.size()) + " images)");
    }
    if (train && !empty.empty()) {
      throw std::runtime_error(root_ + ": class folder" + (empty.size() > 1 ? "s " : " ") +
                               join(empty, ", ") + (empty.size() > 1 ? " have" : " has") +
                               " no images (.png, .jpg, .jpeg, .bmp, .webp, .tif, .tiff, .ppm, "
                               ".pgm); a class the model never sees cannot be learnt: add "
                               "images or remove the folder");
    }
    // Folder names that differ only in bytes that are not UTF-8 could escape to one name.
    std::vector<std::string> sorted = labels_;
    std::sort(sorted.begin(), sorted.end());
    const auto twin = std::adjacent_find(sorted.begin(), sorted.end());
    if (twin != sorted.end()) {
      throw std::runtime_error(root_ + ": two class folders are both named '" + *twin +
                               "' once their bytes that are not UTF-8 are escaped: rename one");
    }
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
  std::optional<RandomResizedCrop> random_crop_;
  std::vector<std::string> labels_;
  std::vector<std::string> files_;
  std::vector<int32_t> targets_;
};

}  // namespace

std::unique_ptr<Dataset> make_folder(const DatasetOptions& o) {
  std::string root = o.dir;
  if (o.name.rfind("folder:", 0) == 0) root = o.name.substr(7);
  if (root.empty()) throw std::invalid_argument("dataset folder: pass the folder with --data-dir");
  return std::make_unique<Folder>(root, o.train, o.rows, o.cols, o.limit, o.transform,
                                  o.train ? o.random_crop : std::nullopt);
}

}  // namespace vitpe
