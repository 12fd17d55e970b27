// The resolution protocols: each checked against what it means, from the sample at
// the training size rendered by the dataset itself: zoom is its bilinear resize, dilute puts it
// in the top-left corner, translate somewhere else, spread scales its positions, canvas draws
// anew (procedural) or centres the photo on black; labels never change; at the training size
// every protocol is the dataset; and the refusals name what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "ops/resample.h"
#include "vit/train/data.h"

namespace vitpe {
namespace {

DatasetOptions procedural(const std::string& name, int64_t size, const std::string& protocol) {
  DatasetOptions o;
  o.name = name;
  o.train = false;
  o.limit = 64;
  o.rows = o.cols = size;
  o.base_rows = o.base_cols = 28;
  o.protocol = protocol;
  o.procedural.noise = 0;  // exact pixels: shapes 1 on 0
  return o;
}

std::vector<float> image(const Dataset& d, int64_t i, int32_t& label) {
  std::vector<float> x(static_cast<size_t>(d.image_numel()));
  label = d.get(i, x.data());
  return x;
}

// The top-left corner of the first filled k x k block of ones (the square), or {-1, -1}.
std::pair<int64_t, int64_t> square_at(const std::vector<float>& x, int64_t rows, int64_t cols,
                                      int64_t k = 5) {
  for (int64_t y = 0; y + k <= rows; ++y)
    for (int64_t c = 0; c + k <= cols; ++c) {
      bool full = true;
      for (int64_t dy = 0; dy < k && full; ++dy)
        for (int64_t dx = 0; dx < k && full; ++dx) full = x[(y + dy) * cols + c + dx] > 0.5f;
      if (full) return {y, c};
    }
  return {-1, -1};
}

TEST(Protocols, TrainingSizeIsTheDatasetItself) {
  for (const std::string& p : protocol_names()) {
    auto plain = make_dataset(procedural("procedural", 28, ""));
    auto with = make_dataset(procedural("procedural", 28, p));
    for (int64_t i = 0; i < 8; ++i) {
      int32_t a, b;
      EXPECT_EQ(image(*plain, i, a), image(*with, i, b)) << p;
      EXPECT_EQ(a, b);
    }
  }
  // canvas is the procedural default: the same images at any size.
  auto plain = make_dataset(procedural("procedural", 42, ""));
  auto canvas = make_dataset(procedural("procedural", 42, "canvas"));
  int32_t a, b;
  EXPECT_EQ(image(*plain, 3, a), image(*canvas, 3, b));
}

TEST(Protocols, ZoomIsTheTrainingImageResized) {
  auto base = make_dataset(procedural("procedural", 28, ""));
  auto zoom = make_dataset(procedural("procedural", 56, "zoom"));
  for (int64_t i = 0; i < 8; ++i) {
    int32_t a, b;
    const std::vector<float> x = image(*base, i, a), z = image(*zoom, i, b);
    std::vector<float> want(56 * 56);
    resample_planes(x.data(), 1, 28, 28, want.data(), 56, 56, Filter::bilinear, true);
    EXPECT_EQ(z, want);
    EXPECT_EQ(a, b);
  }
  EXPECT_NE(zoom->other_size_rule().find("zoom"), std::string::npos);
}

// dilute and translate: the training scene unchanged (noise-free, so exactly), at the top-left
// corner or at an offset; spread: the same label with the square's corner scaled.
TEST(Protocols, DiluteTranslateSpreadKeepTheScene) {
  for (const std::string name : {"procedural", "quadrant"}) {
    auto base = make_dataset(procedural(name, 28, ""));
    auto dilute = make_dataset(procedural(name, 56, "dilute"));
    auto translate = make_dataset(procedural(name, 56, "translate"));
    auto spread = make_dataset(procedural(name, 56, "spread"));
    int moved = 0;
    for (int64_t i = 0; i < 64; ++i) {
      int32_t l0, l1, l2, l3;
      const std::vector<float> x = image(*base, i, l0), d = image(*dilute, i, l1),
                               t = image(*translate, i, l2), s = image(*spread, i, l3);
      EXPECT_EQ(l0, l1);
      EXPECT_EQ(l0, l2);
      EXPECT_EQ(l0, l3);
      // dilute: the 28 x 28 corner is the training image, the rest background.
      for (int64_t y = 0; y < 56; ++y)
        for (int64_t c = 0; c < 56; ++c) {
          const float want = y < 28 && c < 28 ? x[y * 28 + c] : 0.f;
          ASSERT_EQ(d[y * 56 + c], want) << name << " sample " << i << " at " << y << "," << c;
        }
      // translate: the training image at one offset.
      const auto [sy, sx] = square_at(x, 28, 28);
      const auto [ty, tx] = square_at(t, 56, 56);
      ASSERT_GE(sy, 0);
      ASSERT_GE(ty, 0);
      const int64_t oy = ty - sy, ox = tx - sx;
      moved += oy != 0 || ox != 0;
      for (int64_t y = 0; y < 28; ++y)
        for (int64_t c = 0; c < 28; ++c)
          ASSERT_EQ(t[(y + oy) * 56 + c + ox], x[y * 28 + c]) << name << " sample " << i;
      // spread: corners scaled by (56 - 5) / (28 - 5), floored.
      const auto [py, px] = square_at(s, 56, 56);
      EXPECT_EQ(py, sy * 51 / 23) << name << " sample " << i;
      EXPECT_EQ(px, sx * 51 / 23) << name << " sample " << i;
      if (std::string(name) == "quadrant") {
        // The square stays wholly inside the quadrant its label names.
        const bool bottom = l3 >= 2, right = (l3 & 1) != 0;
        EXPECT_EQ(py >= 28, bottom) << "sample " << i;
        EXPECT_EQ(px >= 28, right) << "sample " << i;
        EXPECT_LE((py % 28) + 5, 28) << "sample " << i;
        EXPECT_LE((px % 28) + 5, 28) << "sample " << i;
      }
    }
    EXPECT_GT(moved, 50) << name << ": translate should move nearly every scene";
  }
}

TEST(Protocols, PhotosTakeZoomCanvasDilute) {
  if (!std::filesystem::exists(default_fashion_mnist_dir() + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << default_fashion_mnist_dir()
                 << " (Debian package dataset-fashion-mnist)";
  }
  DatasetOptions o;
  o.train = false;
  o.limit = 4;
  auto base = make_dataset(o);
  o.rows = o.cols = 44;
  auto plain = make_dataset(o);
  o.base_rows = o.base_cols = 28;
  for (const std::string p : {"zoom", "canvas", "dilute"}) {
    o.protocol = p;
    auto d = make_dataset(o);
    ASSERT_EQ(d->rows(), 44);
    for (int64_t i = 0; i < 4; ++i) {
      int32_t a, b;
      const std::vector<float> x = image(*base, i, a), y = image(*d, i, b);
      EXPECT_EQ(a, b);
      if (p == "zoom") {
        int32_t c;
        EXPECT_EQ(y, image(*plain, i, c)) << "zoom is fashion-mnist's own rule";
        continue;
      }
      const int64_t off = p == "canvas" ? 8 : 0;
      for (int64_t r = 0; r < 44; ++r)
        for (int64_t c = 0; c < 44; ++c) {
          const bool in = r >= off && r < off + 28 && c >= off && c < off + 28;
          ASSERT_EQ(y[r * 44 + c], in ? x[(r - off) * 28 + c - off] : d->pad_value(0)) << p;
        }
    }
  }
}

TEST(Protocols, RefusalsSayWhatIsWrong) {
  auto message = [](const DatasetOptions& o) {
    try {
      make_dataset(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  DatasetOptions o = procedural("procedural", 56, "stretch");
  EXPECT_NE(message(o).find("unknown resolution protocol 'stretch' (known: zoom, canvas"),
            std::string::npos)
      << message(o);
  o = procedural("procedural", 20, "dilute");
  EXPECT_NE(message(o).find("protocol dilute puts the 28x28 scene on a larger canvas, but the "
                            "size asked for is 20x20"),
            std::string::npos)
      << message(o);
  o = procedural("procedural", 20, "zoom");  // shrinking is a zoom too
  EXPECT_EQ(message(o), "no error");
  DatasetOptions f;
  f.name = "fashion-mnist";
  f.dir = "/nonexistent";
  f.rows = f.cols = 56;
  f.base_rows = f.base_cols = 28;
  f.protocol = "spread";
  EXPECT_NE(message(f).find("needs the procedural or quadrant dataset, not fashion-mnist"),
            std::string::npos)
      << message(f);
}

}  // namespace
}  // namespace vitpe
