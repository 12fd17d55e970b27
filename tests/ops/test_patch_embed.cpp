// patch_embed_forward / patch_embed_backward (ops/cpu/patch_embed.cpp) against the direct
// convolution of ops/reference/patch_embed.cpp and against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::random_tensor;

void check_patch_embed_forward(int64_t bs, int64_t c, int64_t h, int64_t w, int64_t p, int64_t d,
                               bool bias, uint64_t seed) {
  Tensor x = random_tensor(Shape{bs, c, h, w}, seed);
  Tensor wt = random_tensor(Shape{d, c, p, p}, seed + 1, 1.0 / p);
  Tensor b = bias ? random_tensor(Shape{d}, seed + 2) : Tensor();
  Tensor y = Tensor::full(Shape{bs, (h / p) * (w / p), d}, 1e9f);
  patch_embed_forward(y, x, wt, b);
  EXPECT_LT(max_rel_error(y, ref::patch_embed(x, wt, b, p)), 1e-5)
      << bs << "x" << c << "x" << h << "x" << w << " patch " << p << " dim " << d;
}

TEST(PatchEmbedForward, MatchesReferenceOnViTShape) {
  check_patch_embed_forward(1, 3, 224, 224, 16, 384, true, 1);
}

TEST(PatchEmbedForward, MatchesReferenceOnAnyChannelsAndNonSquareImages) {
  check_patch_embed_forward(2, 3, 32, 48, 16, 24, true, 2);  // 2 x 3 grid
  check_patch_embed_forward(3, 1, 8, 12, 4, 7, true, 3);     // grayscale
  check_patch_embed_forward(1, 5, 6, 10, 2, 9, false, 4);    // 5 channels, no bias
  check_patch_embed_forward(2, 4, 28, 28, 4, 96, true, 5);   // Swin-like patch 4
  check_patch_embed_forward(1, 2, 3, 3, 3, 4, true, 6);      // one patch
  check_patch_embed_forward(2, 3, 5, 7, 1, 3, true, 7);      // patch 1 = a per-pixel linear
}

// L = sum(g * y): gradients from the backward vs central differences of L in double.
TEST(PatchEmbedBackward, MatchesFiniteDifferences) {
  const int64_t bs = 2, c = 2, h = 4, wd = 6, p = 2, d = 3, gh = h / p, gw = wd / p;
  Tensor x = random_tensor(Shape{bs, c, h, wd}, 8);
  Tensor w = random_tensor(Shape{d, c, p, p}, 9);
  Tensor b = random_tensor(Shape{d}, 10);
  Tensor g = random_tensor(Shape{bs, gh * gw, d}, 11);
  auto loss = [&]() {
    double s = 0;
    for (int64_t bi = 0; bi < bs; ++bi)
      for (int64_t gy = 0; gy < gh; ++gy)
        for (int64_t gx = 0; gx < gw; ++gx)
          for (int64_t o = 0; o < d; ++o) {
            double v = b.at(o);
            for (int64_t ci = 0; ci < c; ++ci)
              for (int64_t i = 0; i < p; ++i)
                for (int64_t j = 0; j < p; ++j)
                  v += static_cast<double>(
                           x.at(((bi * c + ci) * h + gy * p + i) * wd + gx * p + j)) *
                       w.at(((o * c + ci) * p + i) * p + j);
            s += v * g.at((bi * gh * gw + gy * gw + gx) * d + o);
          }
    return s;
  };
  Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape()),
         db = Tensor::zeros(b.shape());
  patch_embed_backward(dx, dw, db, g, x, w);
  EXPECT_LT(max_rel_error(dx, testing::numeric_grad(x, loss)), 1e-4);
  EXPECT_LT(max_rel_error(dw, testing::numeric_grad(w, loss)), 1e-4);
  EXPECT_LT(max_rel_error(db, testing::numeric_grad(b, loss)), 1e-4);
}

TEST(PatchEmbedBackward, AccumulatesAndSkipsUndefinedGradients) {
  Tensor x = random_tensor(Shape{2, 3, 8, 12}, 12), w = random_tensor(Shape{5, 3, 4, 4}, 13);
  Tensor dy = random_tensor(Shape{2, 6, 5}, 14);
  Tensor dx1 = Tensor::zeros(x.shape()), dw1 = Tensor::zeros(w.shape()),
         db1 = Tensor::zeros(Shape{5});
  patch_embed_backward(dx1, dw1, db1, dy, x, w);
  Tensor dx2 = Tensor::zeros(x.shape()), dw2 = Tensor::zeros(w.shape()),
         db2 = Tensor::zeros(Shape{5});
  patch_embed_backward(dx2, dw2, db2, dy, x, w);
  patch_embed_backward(dx2, dw2, db2, dy, x, w);
  for (auto [once, twice] : {std::pair{dx1, dx2}, std::pair{dw1, dw2}, std::pair{db1, db2}}) {
    Tensor want = once.clone();
    for (int64_t i = 0; i < want.numel(); ++i) want.at(i) *= 2;
    EXPECT_LT(max_rel_error(twice, want), 1e-6);
  }
  // Only dw, then only dx: each equals the full call's.
  Tensor none, none2, dw3 = Tensor::zeros(w.shape()), dx3 = Tensor::zeros(x.shape());
  patch_embed_backward(none, dw3, none2, dy, x, w);
  patch_embed_backward(dx3, none, none2, dy, x, w);
  EXPECT_LT(max_rel_error(dw3, dw1), 1e-6);
  EXPECT_LT(max_rel_error(dx3, dx1), 1e-6);
}

// Under FixedWorkSplit (training) the patch embedding's product and its weight gradient are the
// same bits on 1, 2 and 3 threads: the quick study's 50 images of 28 px in patches of 7 at D 64
// (800 rows; the weight gradient [64, 49] over 800 rows), and vit-fmnist's 128 images in patches
// of 4 at D 128.
TEST(PatchEmbed, SameBitsOnAnyThreadCountUnderFixedWorkSplit) {
  const int before = num_threads();
  const FixedWorkSplit fixed;
  for (auto [bs, p, d] : {std::tuple<int64_t, int64_t, int64_t>{50, 7, 64}, {128, 4, 128}}) {
    Tensor x = random_tensor(Shape{bs, 1, 28, 28}, 40);
    Tensor w = random_tensor(Shape{d, 1, p, p}, 41, 1.0 / p), b = random_tensor(Shape{d}, 42);
    const int64_t tokens = (28 / p) * (28 / p);
    Tensor dy = random_tensor(Shape{bs, tokens, d}, 43);
    const Tensor want = ref::patch_embed(x, w, b, p);
    std::vector<Tensor> first;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor y = Tensor::empty(Shape{bs, tokens, d});
      patch_embed_forward(y, x, w, b);
      Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape());
      Tensor db = Tensor::zeros(b.shape());
      patch_embed_backward(dx, dw, db, dy, x, w);
      EXPECT_LT(max_rel_error(y, want), 1e-5) << bs << " images, " << threads << " threads";
      const std::vector<Tensor> now = {y, dx, dw, db};
      if (threads == 1) first = now;
      for (size_t i = 0; i < now.size(); ++i) {
        EXPECT_EQ(max_rel_error(now[i], first[i]), 0.0)
            << "output " << i << ", " << bs << " images, " << threads << " threads";
      }
    }
  }
  set_num_threads(before);
}

TEST(PatchEmbed, ImageNotAMultipleOfThePatchSaysBothNumbers) {
  Tensor x = Tensor::zeros(Shape{1, 3, 30, 48}), w = Tensor::zeros(Shape{8, 3, 16, 16});
  Tensor y = Tensor::empty(Shape{1, 3, 8});
  std::string m = testing::message_of([&] { patch_embed_forward(y, x, w, Tensor()); });
  EXPECT_NE(m.find("patch_embed_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("30"), std::string::npos) << m;
  EXPECT_NE(m.find("48"), std::string::npos) << m;
  EXPECT_NE(m.find("16"), std::string::npos) << m;
  EXPECT_THROW(patch_embed_forward(y, x, w, Tensor()), ShapeError);
  Tensor none;
  EXPECT_THROW(patch_embed_backward(none, none, none, y, x, w), ShapeError);
}

TEST(PatchEmbed, ShapeErrorsNameTheOpAndShapes) {
  Tensor x = Tensor::zeros(Shape{2, 3, 32, 32}), w = Tensor::zeros(Shape{8, 3, 16, 16});
  Tensor y = Tensor::empty(Shape{2, 4, 9});
  std::string m = testing::message_of([&] { patch_embed_forward(y, x, w, Tensor()); });
  EXPECT_NE(m.find("[2, 4, 8]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 4, 9]"), std::string::npos) << m;
  Tensor y2 = Tensor::empty(Shape{2, 4, 8});
  Tensor w_c = Tensor::zeros(Shape{8, 1, 16, 16});  // channel mismatch
  m = testing::message_of([&] { patch_embed_forward(y2, x, w_c, Tensor()); });
  EXPECT_NE(m.find("[8, 1, 16, 16]"), std::string::npos) << m;
  EXPECT_THROW(patch_embed_forward(y2, x, w_c, Tensor()), ShapeError);
  Tensor x3 = Tensor::zeros(Shape{3, 32, 32});
  EXPECT_THROW(patch_embed_forward(y2, x3, w, Tensor()), ShapeError);
  EXPECT_THROW(patch_embed_forward(y2, x, w, Tensor::zeros(Shape{7})), ShapeError);
}

}  // namespace
}  // namespace vitpe
