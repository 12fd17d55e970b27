// The dataset factory, the seed mixer and the checks of class names across splits and models.
#include "vit/train/data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <vector>

#include "ops/util.h"
#include "vit/train/data_internal.h"

namespace vitpe {

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  auto fin = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = fin(a);
  h = fin(h ^ b);
  h = fin(h ^ c);
  h = fin(h ^ d);
  return h;
}

int32_t Dataset::get_augmented(int64_t, uint64_t, bool, float*) const {
  throw std::logic_error(name() + ": renders no augmented samples of its own");
}

void RandomResizedCrop::validate() const {
  auto pair = [](double a, double b) {
    char t[64];
    std::snprintf(t, sizeof t, "%g %g", a, b);
    return std::string(t);
  };
  if (!(std::isfinite(scale_min) && std::isfinite(scale_max) && scale_min > 0 &&
        scale_min <= scale_max && scale_max <= 1)) {
    throw std::invalid_argument("--scale " + pair(scale_min, scale_max) +
                                ": expected 0 < MIN <= MAX <= 1 (shares of the image's area)");
  }
  if (!(std::isfinite(ratio_min) && std::isfinite(ratio_max) && ratio_min > 0 &&
        ratio_min <= ratio_max)) {
    throw std::invalid_argument("--ratio " + pair(ratio_min, ratio_max) +
                                ": expected 0 < MIN <= MAX (aspect ratios, width / height)");
  }
}

std::string RandomResizedCrop::text() const {
  char s[128];
  std::snprintf(s, sizeof s, "random-resized crop (scale %g-%g, ratio %.3g-%.3g)", scale_min,
                scale_max, ratio_min, ratio_max);
  return s;
}

CropBox sample_crop_box(int width, int height, const RandomResizedCrop& crop, Rng& rng) {
  // Python's round() and random.randint(a, b) (b inclusive).
  auto round_even = [](double x) { return static_cast<int>(std::nearbyint(x)); };
  auto randint = [&](int lo, int hi) {
    return lo + static_cast<int>(rng.below(static_cast<uint64_t>(hi - lo) + 1));
  };
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(crop.ratio_min), log_hi = std::log(crop.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = rng.uniform(crop.scale_min, crop.scale_max) * area;
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = round_even(std::sqrt(target * aspect));
    const int h = round_even(std::sqrt(target / aspect));
    // torchvision's bounds (timm's omit w, h > 0, which a tiny image can miss).
    if (w > 0 && h > 0 && w <= width && h <= height) {
      CropBox b;
      b.height = h;
      b.width = w;
      b.top = randint(0, height - h);
      b.left = randint(0, width - w);
      return b;
    }
  }
  CropBox b;
  const double in_ratio = static_cast<double>(width) / height;
  b.width = width;
  b.height = height;
  if (in_ratio < crop.ratio_min) {
    b.height = std::max(1, std::min(height, round_even(width / crop.ratio_min)));
  } else if (in_ratio > crop.ratio_max) {
    b.width = std::max(1, std::min(width, round_even(height * crop.ratio_max)));
  }
  b.top = (height - b.height) / 2;
  b.left = (width - b.width) / 2;
  return b;
}

void resized_crop_planes(const float* src, int64_t C, int64_t H, int64_t W, const CropBox& box,
                         bool flip, float* out) {
  check_crop_box(box, W, H, "sample");
  // One axis's source index pair and weight for each output position.
  struct Tap {
    int64_t i0, i1;
    float w1;
  };
  auto taps = [](int64_t out_n, int64_t in_n, int64_t offset) {
    std::vector<Tap> t(static_cast<size_t>(out_n));
    const float scale = static_cast<float>(in_n) / static_cast<float>(out_n);
    for (int64_t o = 0; o < out_n; ++o) {
      const float x = std::max(0.0f, (static_cast<float>(o) + 0.5f) * scale - 0.5f);
      const auto i0 = std::min(static_cast<int64_t>(x), in_n - 1);
      const int64_t i1 = std::min(i0 + 1, in_n - 1);
      t[static_cast<size_t>(o)] = {offset + i0, offset + i1, x - static_cast<float>(i0)};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(H, box.height, box.top), tx = taps(W, box.width, box.left);
  for (int64_t c = 0; c < C; ++c) {  // the taps are the same for every channel
    const float* plane = src + c * H * W;
    float* o = out + c * H * W;
    for (int64_t y = 0; y < H; ++y) {
      const Tap& a = ty[static_cast<size_t>(y)];
      const float* r0 = plane + a.i0 * W;
      const float* r1 = plane + a.i1 * W;
      for (int64_t x = 0; x < W; ++x) {
        const Tap& b = tx[static_cast<size_t>(flip ? W - 1 - x : x)];
        const float top = r0[b.i0] + b.w1 * (r0[b.i1] - r0[b.i0]);
        const float bottom = r1[b.i0] + b.w1 * (r1[b.i1] - r1[b.i0]);
        o[y * W + x] = top + a.w1 * (bottom - top);
      }
    }
  }
}

const std::vector<std::string>& protocol_names() {
  static const std::vector<std::string> names = {"zoom", "canvas", "dilute", "translate", "spread"};
  return names;
}

std::string protocol_description(const std::string& p) {
  if (p == "zoom") return "zoom: the training-size image resized to the size (same content)";
  if (p == "canvas") {
    return "canvas: same-size objects on a larger canvas (procedural: drawn at the size; photos: "
           "centred on black)";
  }
  if (p == "dilute")
    return "dilute: the training-size image in the top-left corner, background "
           "around it (same positions and distances, more background)";
  if (p == "translate") {
    return "translate: the training-size scene at a random offset (same distances, new "
           "positions; procedural only)";
  }
  if (p == "spread") {
    return "spread: the scene's positions scaled to the size, same-size objects (new distances; "
           "procedural only)";
  }
  throw std::invalid_argument("unknown resolution protocol '" + p +
                              "' (known: zoom, canvas, dilute, translate, spread)");
}

namespace {

// A photo dataset (fashion-mnist, folder) rendered at the training size and pasted into a larger
// canvas of its normalised black: centred (canvas) or at the top-left corner (dilute).
class Pasted : public Dataset {
 public:
  Pasted(std::unique_ptr<Dataset> base, int64_t rows, int64_t cols, bool centred)
      : base_(std::move(base)), rows_(rows), cols_(cols), centred_(centred) {}
  std::string name() const override { return base_->name(); }
  int64_t size() const override { return base_->size(); }
  int64_t classes() const override { return base_->classes(); }
  int64_t channels() const override { return base_->channels(); }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  std::vector<std::string> labels() const override { return base_->labels(); }
  int64_t crop_padding() const override { return base_->crop_padding(); }
  int32_t flipped_label(int32_t label) const override { return base_->flipped_label(label); }
  float pad_value(int64_t c) const override { return base_->pad_value(c); }
  std::vector<float> mean() const override { return base_->mean(); }
  std::vector<float> std_dev() const override { return base_->std_dev(); }
  std::string other_size_rule() const override {
    return centred_ ? "canvas: the training-size image centred on a black canvas of the size"
                    : "dilute: the training-size image in the top-left corner of a black canvas";
  }
  int32_t get(int64_t i, float* image) const override {
    const int64_t C = channels(), h = base_->rows(), w = base_->cols();
    std::vector<float> src(static_cast<size_t>(C * h * w));
    const int32_t label = base_->get(i, src.data());
    const int64_t y0 = centred_ ? (rows_ - h) / 2 : 0, x0 = centred_ ? (cols_ - w) / 2 : 0;
    for (int64_t c = 0; c < C; ++c) {
      float* plane = image + c * rows_ * cols_;
      std::fill(plane, plane + rows_ * cols_, pad_value(c));
      for (int64_t y = 0; y < h; ++y)
        std::copy_n(&src[(c * h + y) * w], w, plane + (y0 + y) * cols_ + x0);
    }
    return label;
  }

 private:
  std::unique_ptr<Dataset> base_;
  int64_t rows_, cols_;
  bool centred_;
};

std::unique_ptr<Dataset> make_native(const DatasetOptions& o) {
  if (o.name == "fashion-mnist" || o.name == "fmnist") return make_fashion_mnist(o);
  if (o.name == "procedural" || o.name == "relations") return make_procedural(o);
  if (o.name == "quadrant") return make_quadrant(o);
  if (o.name == "folder" || o.name.rfind("folder:", 0) == 0) return make_folder(o);
  throw std::invalid_argument("unknown dataset '" + o.name +
                              "' (known: fashion-mnist, procedural, quadrant, folder:PATH)");
}

}  // namespace

std::unique_ptr<Dataset> make_dataset(const DatasetOptions& o) {
  if (o.protocol.empty()) return make_native(o);
  protocol_description(o.protocol);  // checks the name
  const bool procedural = o.name == "procedural" || o.name == "relations" || o.name == "quadrant";
  if (procedural) return make_native(o);  // the procedural datasets place their own scenes
  if (o.protocol == "translate" || o.protocol == "spread") {
    throw std::invalid_argument("resolution protocol " + o.protocol +
                                " moves the objects of a scene, so it needs the procedural or "
                                "quadrant dataset, not " +
                                o.name + " (photos take zoom, canvas or dilute)");
  }
  if (o.protocol == "zoom" || o.base_rows == 0 || o.rows == 0 ||
      (o.rows == o.base_rows && o.cols == o.base_cols)) {
    return make_native(o);  // photos are resized to the size: zoom
  }
  if (o.rows < o.base_rows || o.cols < o.base_cols) {
    throw std::invalid_argument("resolution protocol " + o.protocol + " puts the " +
                                std::to_string(o.base_rows) + "x" + std::to_string(o.base_cols) +
                                " image on a larger canvas, but the size asked for is " +
                                std::to_string(o.rows) + "x" + std::to_string(o.cols));
  }
  DatasetOptions base = o;
  base.rows = o.base_rows;
  base.cols = o.base_cols;
  if (base.transform) {
    base.transform->rows = static_cast<int>(o.base_rows);
    base.transform->cols = static_cast<int>(o.base_cols);
  }
  return std::make_unique<Pasted>(make_native(base), o.rows, o.cols, o.protocol == "canvas");
}

// ---- class names across splits and models --------------------------------------------------

namespace {

// At most 8 names, quoted, then how many more: a message stays readable for 1000 classes.
std::string name_list(const std::vector<std::string>& names) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min<size_t>(names.size(), 8); ++i)
    shown.push_back("'" + names[i] + "'");
  std::string s = join(shown, ", ");
  if (names.size() > 8) s += " and " + std::to_string(names.size() - 8) + " more";
  return s;
}

// How the class names a (of what_a) and b (of what_b) differ, for a message: the names only in
// one of them, or with the same names, the first positions where the orders differ.
std::string name_differences(const std::vector<std::string>& a, const std::string& what_a,
                             const std::vector<std::string>& b, const std::string& what_b) {
  const std::set<std::string> in_a(a.begin(), a.end()), in_b(b.begin(), b.end());
  std::vector<std::string> only_a, only_b;
  for (const std::string& n : a)
    if (!in_b.count(n)) only_a.push_back(n);
  for (const std::string& n : b)
    if (!in_a.count(n)) only_b.push_back(n);
  std::vector<std::string> parts;
  if (!only_a.empty()) parts.push_back("only in " + what_a + ": " + name_list(only_a));
  if (!only_b.empty()) parts.push_back("only in " + what_b + ": " + name_list(only_b));
  if (!parts.empty()) return join(parts, "; ");
  if (a.size() != b.size()) {
    return what_a + " names " + std::to_string(a.size()) + " classes, " + what_b + " " +
           std::to_string(b.size()) + " (a name repeats)";
  }
  for (size_t i = 0, shown = 0; i < a.size() && shown < 3; ++i) {
    if (a[i] == b[i]) continue;
    parts.push_back("class " + std::to_string(i) + " is '" + a[i] + "' in " + what_a + ", '" +
                    b[i] + "' in " + what_b);
    ++shown;
  }
  return "the same names in another order: " + join(parts, "; ");
}

}  // namespace

void check_split_classes(const Dataset& train, const Dataset& test, const std::string& where) {
  const std::vector<std::string> a = train.labels(), b = test.labels();
  if (!a.empty() && !b.empty() && a != b) {
    throw std::invalid_argument(
        where + ": the training and test splits have other classes (" +
        name_differences(a, "the training split", b, "the test split") +
        "); a class's index is its position among the sorted class folders, so the test split "
        "would be scored against the wrong classes: give both splits the same class folders");
  }
  if (train.classes() != test.classes()) {
    throw std::invalid_argument(where + ": the training split has " +
                                std::to_string(train.classes()) + " classes, the test split " +
                                std::to_string(test.classes()));
  }
}

std::string check_model_classes(const std::vector<std::string>& model_labels, int64_t model_classes,
                                const Dataset& data, bool by_index,
                                const std::string& by_index_flag) {
  const std::vector<std::string> names = data.labels();
  const bool both_named = !model_labels.empty() && !names.empty();
  if (data.classes() != model_classes) {
    throw std::invalid_argument(
        "the model has " + std::to_string(model_classes) + " classes, the dataset " + data.name() +
        " " + std::to_string(data.classes()) +
        (both_named ? " (" + name_differences(model_labels, "the model", names, "the dataset") + ")"
                    : std::string()));
  }
  if (by_index) {
    return "class names not compared (" + by_index_flag +
           "): the dataset's class i is taken to be "
           "the model's class i";
  }
  if (!both_named) {
    return std::string(model_labels.empty() ? "the model records" : "the dataset has") +
           " no class names, so only the count (" + std::to_string(model_classes) +
           ") could be checked: the dataset's class i is taken to be the model's class i";
  }
  if (model_labels != names) {
    throw std::invalid_argument(
        "the model's classes are not the dataset's (" +
        name_differences(model_labels, "the model", names, "the dataset " + data.name()) +
        "): every image would be scored against another class; pass " + by_index_flag +
        " to match them by position instead (e.g. ImageNet's synset folders for a model that "
        "records ImageNet's names)");
  }
  return "";
}

}  // namespace vitpe
