// Datasets for training and evaluation: Fashion-MNIST (IDX .gz files), ImageFolder (one
// subfolder per class, decoded with OpenCV) and a procedural "spatial relation" dataset whose
// label depends only on where two shapes are, so that positional encodings matter.
//
// Every dataset renders its images at a requested size (rows x cols), which is how the
// trainer evaluates a model at other resolutions:
// - fashion-mnist: the 28x28 image is resized bilinearly (cv::INTER_LINEAR) to the size;
// - folder: each image is resized (no crop) to the size;
// - procedural: the canvas is drawn at the size with objects of the same pixel size, so a
//   larger canvas means a larger grid of patches, not larger objects (extrapolation);
// or, with DatasetOptions::protocol, by one of the resolution protocols (zoom, canvas, dilute,
// translate, spread) starting from the training size.
// get() is const and thread-safe: the loader calls it from its background thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/random.h"
#include "vit/io/preprocess.h"
#include "vit/models/model.h"

namespace vitpe {

// Mixes integers into one well-spread 64-bit seed (SplitMix64 finaliser over each value), so
// that per-sample and per-epoch random streams are pure functions of their coordinates.
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0);

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  virtual int64_t classes() const = 0;
  virtual int64_t channels() const = 0;
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  int64_t image_numel() const { return channels() * rows() * cols(); }

  // image: [C, rows, cols] normalised floats (caller-owned, image_numel() long) -> label in
  // [0, classes). Thread-safe.
  virtual int32_t get(int64_t i, float* image) const = 0;

  // Class names (may be empty: print indices).
  virtual std::vector<std::string> labels() const { return {}; }

  // Augmentation policy of the dataset. crop_padding: random crops of the image padded by this
  // many pixels on each side (0: no crops). flipped_label: the label of the horizontally
  // flipped image, or -1 when a flip is not allowed.
  virtual int64_t crop_padding() const { return 0; }
  virtual int32_t flipped_label(int32_t label) const { return -1; }
  // Value a padded pixel gets in channel c (the normalised black).
  virtual float pad_value(int64_t c) const { return 0.0f; }
  // A dataset with its own training transform (an image folder with DatasetOptions::random_crop:
  // timm's random-resized crop and flip from the original image) renders augmented samples
  // itself, instead of the loader's crop and flip of get()'s image. get_augmented is a pure
  // function of (i, seed, flip) and thread-safe; flip: whether flips are allowed at all.
  virtual bool augments_itself() const { return false; }
  virtual int32_t get_augmented(int64_t i, uint64_t seed, bool flip, float* image) const;

  // The per-channel mean and std (pixel units in [0, 1]) get() normalises with: a model trained
  // on the dataset records them, so it classifies raw images the way it saw them.
  virtual std::vector<float> mean() const = 0;
  virtual std::vector<float> std_dev() const = 0;
  // How get() renders the images at a size other than the native one (for reports).
  virtual std::string other_size_rule() const = 0;
};

// ---- Fashion-MNIST ---------------------------------------------------------------------------

// One IDX array: dims and raw bytes (unsigned byte data only, type code 0x08).
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
// Reads a gzip-compressed IDX file. expected_ndim: 1 for labels, 3 for images. Throws
// std::runtime_error naming the file for a missing file, a bad gzip stream, a wrong magic
// number, or data shorter/longer than the header says.
IdxArray read_idx_gz(const std::string& path, int expected_ndim);

// Normalised with kFashionMnistMean / kFashionMnistStd (vit/models/model.h, the presets' too).

// ---- procedural spatial relations --------------------------------------------------------------

// Labels of the procedural dataset: where shape A (a filled square) is relative to shape B
// (a plus-shaped cross).
enum class Relation : int32_t { left = 0, right = 1, above = 2, below = 3 };
const char* relation_name(int32_t label);
// "top-left", "top-right", "bottom-left", "bottom-right" (the quadrant probe's labels).
const char* quadrant_name(int32_t label);

struct ProceduralOptions {
  int64_t object = 5;  // side of both shapes in pixels (independent of the canvas)
  int64_t margin = 1;  // minimal distance of a shape to the border
  float noise = 0.2f;  // std of the Gaussian pixel noise (background 0, shapes 1)
};

// ---- timm's training transform for photos -----------------------------------------------------

// timm's RandomResizedCropAndInterpolation (its --scale and --ratio): a box of a random share of
// the image's area in [scale_min, scale_max] and a log-uniform aspect ratio (width / height) in
// [ratio_min, ratio_max], at a uniform position, resized to the training size with the model's
// interpolation; then a horizontal flip with probability 0.5 (timm's --hflip).
struct RandomResizedCrop {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  // Throws std::invalid_argument naming the flag: 0 < scale_min <= scale_max <= 1 and
  // 0 < ratio_min <= ratio_max.
  void validate() const;
  // "random-resized crop (scale 0.08-1, ratio 0.75-1.33)".
  std::string text() const;
};

// The box timm draws for a width x height image: up to 10 tries of area share and ratio, each
// kept when the box fits (position uniform over where it fits); after 10 misses, the centre box
// of the whole image clamped to the ratio range. Draws from rng in timm's order.
CropBox sample_crop_box(int width, int height, const RandomResizedCrop& crop, Rng& rng);

// A rendered sample, src: [C, H, W] -> out: [C, H, W]: the box of each channel resized to H x W
// bilinearly as torch's F.interpolate(mode='bilinear', align_corners=False) (source coordinate
// (x + 0.5) * box.width / W - 0.5, clamped at the box's edges), then mirrored left-right when
// `flip`. The box must lie inside the sample (sample_crop_box's do).
void resized_crop_planes(const float* src, int64_t C, int64_t H, int64_t W, const CropBox& box,
                         bool flip, float* out);

// ---- the factory -----------------------------------------------------------------------------

struct DatasetOptions {
  // "fashion-mnist", "procedural", or "folder" (an ImageFolder at dir; "folder:PATH" also works).
  std::string name = "fashion-mnist";
  // Data directory; empty = the default (/usr/share/datasets/fashion-mnist for fashion-mnist).
  std::string dir;
  bool train = true;
  // Size to render the images at; 0 = the dataset's native size (28 for fashion-mnist and
  // procedural, 224 for folder).
  int64_t rows = 0, cols = 0;
  // Number of samples: 0 = all (procedural: 60000 train, 10000 test); otherwise the first
  // `limit` samples (fashion-mnist, folder) or exactly `limit` samples (procedural).
  int64_t limit = 0;
  // Procedural only: the dataset seed (the test split uses a different stream than train).
  uint64_t seed = 0;
  ProceduralOptions procedural;
  // Folder only: render each image with this transform (a model's evaluation transform, its
  // size, crop, interpolation, channels, mean and std: `vitpe eval` passes the model's) instead
  // of the bilinear resize to rows x cols with ImageNet's statistics.
  std::optional<Preprocess> transform;
  // Folder only, with `transform`: the training split's augmented samples are timm's training
  // transform built from it (Dataset::augments_itself): this random-resized crop of the decoded
  // image to the transform's size with its interpolation, a flip, its mean and std. get() (no
  // augmentation) stays the evaluation transform.
  std::optional<RandomResizedCrop> random_crop;
  // How a size other than the training size base_rows x base_cols (0: the dataset's native
  // size) is rendered, for evaluating a trained model at other resolutions. Empty: the
  // dataset's own rule (other_size_rule: zoom for fashion-mnist and folder, canvas for
  // procedural and quadrant). See protocol_names() for the choices.
  std::string protocol;
  int64_t base_rows = 0, base_cols = 0;
};

// The resolution protocols, each a pure function of the sample at the training size T and the
// new size L (>= T):
//   zoom       the image at T resized bilinearly to L: the same content on more patches;
//   canvas     same-size objects on a larger canvas: procedural scenes drawn at L (new positions
//              and distances), photos (fashion-mnist, folder) centred on a black L canvas;
//   dilute     the T image in the top-left corner of the L canvas, the rest background
//              (procedural: its noise): the same positions and distances, more background
//              tokens;
//   translate  procedural only: the T scene at a random offset in the L canvas: the same
//              distances, new absolute positions (and dilute's extra background);
//   spread     procedural only: the T scene's positions scaled by L/T on the L canvas, objects
//              of the same size: new distances over the whole canvas.
// At the training size every protocol is the dataset itself.
const std::vector<std::string>& protocol_names();
// One line per protocol, for help and reports.
std::string protocol_description(const std::string& protocol);

// Throws std::invalid_argument naming the dataset and the protocols it takes for a protocol it
// cannot render, and for sizes smaller than the training size under canvas/dilute/translate.
std::unique_ptr<Dataset> make_dataset(const DatasetOptions& options);

// ---- class names across splits and models --------------------------------------------------

// Class indices are positions in a dataset's labels() (an image folder: its sorted folder
// names), so two splits, or a dataset and a model, agree on what index i means only when their
// names agree position by position.

// Throws std::invalid_argument unless `test` has the classes of `train`: the same names in the
// same order (naming the classes only in one split, or the first position where the order
// differs), or where either has no names, the same count. `where` names the data in the message
// (e.g. "folder:PATH").
void check_split_classes(const Dataset& train, const Dataset& test, const std::string& where);

// A dataset evaluated by a model that says its classes are model_labels (its config's labels,
// possibly empty) and model_classes: the same names in the same order, else
// std::invalid_argument listing the differences (the names only in the model and only in the
// data, or the first positions where the order differs) and naming by_index_flag, the way to
// match them by position instead. Where the model or the dataset has no names (or by_index),
// the counts must match, and the returned note says the names were not checked; "" when they
// were.
std::string check_model_classes(const std::vector<std::string>& model_labels, int64_t model_classes,
                                const Dataset& data, bool by_index,
                                const std::string& by_index_flag);

// The default directory of Fashion-MNIST (Debian's dataset-fashion-mnist package).
std::string default_fashion_mnist_dir();

}  // namespace vitpe
