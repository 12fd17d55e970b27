// The procedural spatial-relation dataset: a filled square (A) and a plus-shaped cross (B) of a
// fixed pixel size on a noisy canvas; the label says where A is relative to B.
//
// Unambiguous by construction, with d = centre(B) - centre(A) in pixels:
//   left  (A left of B):  dx >= object + 1 and |dy| <= dx / 2
//   right (A right of B): -dx >= object + 1 and |dy| <= -dx / 2
//   above (A above B):    dy >= object + 1 and |dx| <= dy / 2
//   below (A below B):    -dy >= object + 1 and |dx| <= -dy / 2
// so the dominant axis of d decides, the shapes never overlap, and no two labels can hold.
// Sample i is a pure function of (seed, split, i, rows, cols): geometry and noise come from
// their own random streams, so noise = 0 draws the same geometry.
//
// The quadrant probe ("quadrant"): the same shapes and noise, but the label is the quadrant of
// the canvas that holds the square (top-left, top-right, bottom-left, bottom-right; the square
// lies wholly inside it), the cross a distractor anywhere else. Its answer is absolute position,
// so a model whose only position signal is relative (relbias, RoPE, ALiBi: no absolute term,
// nothing that marks the border) should not beat chance on it.
//
// Resolution protocols (DatasetOptions::protocol, data.h) at a size L other than the training
// size T: canvas (the default) draws the scene at L; zoom draws it at T and resizes it bilinearly
// to L; dilute, translate and spread take the scene's geometry at T (the same shapes and label as
// the T test image) and draw it on the L canvas (noise over the whole canvas) at the same
// positions, at one random offset (a pure function of the sample), or with the positions scaled
// by (L - k) / (T - k) (floored: squares stay inside their quadrant, the dominant axis of a
// relation stays dominant up to a pixel of rounding).
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "ops/random.h"
#include "ops/resample.h"
#include "vit/train/data.h"
#include "vit/train/data_internal.h"

namespace vitpe {

const char* relation_name(int32_t label) {
  static const char* names[] = {"left", "right", "above", "below"};
  return label >= 0 && label < 4 ? names[label] : "?";
}

const char* quadrant_name(int32_t label) {
  static const char* names[] = {"top-left", "top-right", "bottom-left", "bottom-right"};
  return label >= 0 && label < 4 ? names[label] : "?";
}

namespace {

enum class Task { relation, quadrant };
// How the scene meets a canvas other than the training one (canvas: drawn at the size).
enum class Placement { canvas, zoom, dilute, translate, spread };

Placement placement_of(const std::string& protocol) {
  if (protocol.empty() || protocol == "canvas") return Placement::canvas;
  if (protocol == "zoom") return Placement::zoom;
  if (protocol == "dilute") return Placement::dilute;
  if (protocol == "translate") return Placement::translate;
  return Placement::spread;  // make_dataset checked the name
}

class Procedural : public Dataset {
 public:
  Procedural(const DatasetOptions& o, Task task)
      : task_(task),
        rows_(o.rows ? o.rows : 28),
        cols_(o.cols ? o.cols : 28),
        seed_(mix_seed(o.seed, o.train ? 0x7261696eull : 0x74657374ull)),
        opt_(o.procedural),
        place_(placement_of(o.protocol)),
        base_rows_(o.base_rows ? o.base_rows : rows_),
        base_cols_(o.base_cols ? o.base_cols : cols_) {
    size_ = o.limit > 0 ? o.limit : (o.train ? 60000 : 10000);
    if (base_rows_ == rows_ && base_cols_ == cols_) place_ = Placement::canvas;
    if (place_ != Placement::canvas && place_ != Placement::zoom &&
        (rows_ < base_rows_ || cols_ < base_cols_)) {
      throw std::invalid_argument(name() + " dataset: protocol " + o.protocol + " puts the " +
                                  std::to_string(base_rows_) + "x" + std::to_string(base_cols_) +
                                  " scene on a larger canvas, but the size asked for is " +
                                  std::to_string(rows_) + "x" + std::to_string(cols_));
    }
    const int64_t k = opt_.object, m = opt_.margin;
    // The "along" offset needs room for k + 1 plus both shapes and margins on each axis.
    // The quadrant probe needs a square wholly inside either half of each axis, with room for
    // the cross beside it (a gap of one pixel) wherever the square is.
    int64_t need = task_ == Task::quadrant ? 2 * (k + m + 1) : 2 * k + 1 + 2 * m;
    const int64_t scene_rows = place_ == Placement::canvas ? rows_ : base_rows_;
    const int64_t scene_cols = place_ == Placement::canvas ? cols_ : base_cols_;
    if (k < 3 || scene_rows < need || scene_cols < need) {
      throw std::invalid_argument(name() + " dataset: canvas " + std::to_string(scene_rows) + "x" +
                                  std::to_string(scene_cols) + " too small for objects of " +
                                  std::to_string(k) + " px (need at least " + std::to_string(need) +
                                  " px per side, object >= 3)");
    }
  }

  std::string name() const override { return task_ == Task::quadrant ? "quadrant" : "procedural"; }
  int64_t size() const override { return size_; }
  int64_t classes() const override { return 4; }
  int64_t channels() const override { return 1; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  std::vector<std::string> labels() const override {
    if (task_ == Task::quadrant) return {"top-left", "top-right", "bottom-left", "bottom-right"};
    return {"left", "right", "above", "below"};
  }
  // Already centred: background 0, shapes 1, plus noise.
  std::vector<float> mean() const override { return {0.0f}; }
  std::vector<float> std_dev() const override { return {1.0f}; }
  std::string other_size_rule() const override {
    switch (place_) {
      case Placement::zoom:
        return "zoom: the scene drawn at the training size, resized bilinearly to the size";
      case Placement::dilute:
        return "dilute: the training-size scene in the top-left corner, noise around it";
      case Placement::translate:
        return "translate: the training-size scene at a random offset, noise around it";
      case Placement::spread:
        return "spread: the training-size scene's positions scaled to the size, objects of the "
               "same pixel size";
      default:
        return "canvas drawn at the size, objects of the same pixel size";
    }
  }
  // Mirroring swaps left and right (relations), and the left and right quadrants.
  int32_t flipped_label(int32_t label) const override {
    if (task_ == Task::quadrant) return label ^ 1;
    return label == 0 ? 1 : label == 1 ? 0 : label;
  }

  int32_t get(int64_t i, float* image) const override {
    check_index(*this, i);
    if (place_ == Placement::zoom) {
      std::vector<float> scene(static_cast<size_t>(base_rows_ * base_cols_));
      const int32_t label = draw(i, base_rows_, base_cols_, scene.data());
      resample_planes(scene.data(), 1, base_rows_, base_cols_, image, rows_, cols_,
                      Filter::bilinear, /*antialias=*/true);
      return label;
    }
    return draw(i, rows_, cols_, image);
  }

 private:
  // Sample i on an R x C canvas: its geometry on the scene's canvas (R x C, or the training size
  // for dilute / translate / spread), placed by the protocol, with noise over the whole canvas.
  int32_t draw(int64_t i, int64_t R, int64_t C, float* image) const {
    const int64_t k = opt_.object;
    const bool own = place_ == Placement::canvas || place_ == Placement::zoom;
    const int64_t sr = own ? R : base_rows_, sc = own ? C : base_cols_;
    Rng geo(mix_seed(seed_, static_cast<uint64_t>(i), static_cast<uint64_t>(sr),
                     static_cast<uint64_t>(sc)));
    const auto label = static_cast<int32_t>(geo.below(4));
    int64_t ay, ax, by, bx;
    if (task_ == Task::quadrant) {
      place_quadrant(geo, label, sr, sc, ay, ax, by, bx);
    } else {
      place_relation(geo, label, sr, sc, ay, ax, by, bx);
    }
    if (place_ == Placement::translate) {
      Rng shift(mix_seed(seed_ ^ 0x7472616e736cull, static_cast<uint64_t>(i),
                         static_cast<uint64_t>(R), static_cast<uint64_t>(C)));
      const auto dy = static_cast<int64_t>(shift.below(static_cast<uint64_t>(R - sr + 1)));
      const auto dx = static_cast<int64_t>(shift.below(static_cast<uint64_t>(C - sc + 1)));
      ay += dy, by += dy, ax += dx, bx += dx;
    } else if (place_ == Placement::spread) {
      auto scale = [&](int64_t p, int64_t from, int64_t to) { return p * (to - k) / (from - k); };
      ay = scale(ay, sr, R), by = scale(by, sr, R);
      ax = scale(ax, sc, C), bx = scale(bx, sc, C);
    }

    // Noise: its own stream, a pure function of (seed, i, canvas).
    const int64_t n = R * C;
    if (opt_.noise > 0) {
      Rng noise(mix_seed(seed_ ^ 0x6e6f697365ull, static_cast<uint64_t>(i),
                         static_cast<uint64_t>(R), static_cast<uint64_t>(C)));
      for (int64_t p = 0; p < n; ++p) image[p] = static_cast<float>(noise.normal() * opt_.noise);
    } else {
      std::fill(image, image + n, 0.0f);
    }
    // A: filled square. B: plus (middle row and middle column of its k x k box).
    for (int64_t y = 0; y < k; ++y) {
      for (int64_t x = 0; x < k; ++x) {
        image[(ay + y) * C + ax + x] += 1.0f;
        if (y == k / 2 || x == k / 2) image[(by + y) * C + bx + x] += 1.0f;
      }
    }
    return label;
  }

 private:
  // The square wholly inside quadrant `label` (top rows [m, H/2 - k], bottom rows
  // [H - H/2, H - k - m], the same for columns), the cross anywhere on the canvas where its box
  // does not touch the square's (redrawn until it does not; the square leaves room).
  void place_quadrant(Rng& geo, int32_t label, int64_t rows, int64_t cols, int64_t& ay, int64_t& ax,
                      int64_t& by, int64_t& bx) const {
    const int64_t k = opt_.object, m = opt_.margin;
    auto in_half = [&](int64_t len, bool second) {
      const int64_t lo = second ? len - len / 2 : m, hi = second ? len - k - m : len / 2 - k;
      return lo + static_cast<int64_t>(geo.below(static_cast<uint64_t>(hi - lo + 1)));
    };
    ay = in_half(rows, label >= 2);
    ax = in_half(cols, (label & 1) != 0);
    for (int attempt = 0;; ++attempt) {
      by = m + static_cast<int64_t>(geo.below(static_cast<uint64_t>(rows - k - 2 * m + 1)));
      bx = m + static_cast<int64_t>(geo.below(static_cast<uint64_t>(cols - k - 2 * m + 1)));
      const bool apart =
          by >= ay + k + 1 || ay >= by + k + 1 || bx >= ax + k + 1 || ax >= bx + k + 1;
      if (apart) return;
      if (attempt == 1000) {  // cannot happen on a canvas this class accepts; never loop for ever
        throw std::logic_error("quadrant dataset: no room for the cross");
      }
    }
  }

  // The relation task's geometry (see the top of the file).
  void place_relation(Rng& geo, int32_t label, int64_t rows, int64_t cols, int64_t& ay, int64_t& ax,
                      int64_t& by, int64_t& bx) const {
    const int64_t k = opt_.object, m = opt_.margin;
    const bool horizontal = label < 2;
    // Work in (along, across) coordinates of the top-left corners: along is x for left/right.
    const int64_t len_along = horizontal ? cols : rows;
    const int64_t len_across = horizontal ? rows : cols;
    const int64_t max_pos_along = len_along - k - m;  // top-left positions in [m, max]
    const int64_t max_pos_across = len_across - k - m;
    // |d along| in [k + 1, max - m], |d across| <= |d along| / 2 and within the canvas.
    const int64_t d_along = k + 1 + static_cast<int64_t>(geo.below(max_pos_along - m - k));
    const int64_t cap = std::min(d_along / 2, max_pos_across - m);
    const int64_t d_across = static_cast<int64_t>(geo.below(2 * cap + 1)) - cap;
    const int64_t a_along = m + static_cast<int64_t>(geo.below(max_pos_along - m - d_along + 1));
    const int64_t lo = std::max(m, m - d_across),
                  hi = std::min(max_pos_across, max_pos_across - d_across);
    const int64_t a_across = lo + static_cast<int64_t>(geo.below(hi - lo + 1));
    // B minus A is +d_along for left/above, -d_along for right/below.
    const int64_t sign = (label == 0 || label == 2) ? 1 : -1;
    int64_t a0 = a_along, b0 = a_along + d_along;  // along positions for sign +1
    if (sign < 0) std::swap(a0, b0);
    const int64_t a1 = a_across, b1 = a_across + d_across;
    ay = horizontal ? a1 : a0;
    ax = horizontal ? a0 : a1;
    by = horizontal ? b1 : b0;
    bx = horizontal ? b0 : b1;
  }

  Task task_;
  int64_t rows_, cols_;
  uint64_t seed_;
  ProceduralOptions opt_;
  Placement place_;
  int64_t base_rows_, base_cols_;  // the training size the protocols start from
  int64_t size_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> make_procedural(const DatasetOptions& o) {
  return std::make_unique<Procedural>(o, Task::relation);
}

std::unique_ptr<Dataset> make_quadrant(const DatasetOptions& o) {
  return std::make_unique<Procedural>(o, Task::quadrant);
}

}  // namespace vitpe
