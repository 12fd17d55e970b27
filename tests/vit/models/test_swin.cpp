// Swin: window layout and shift mask against a direct roll/pad/partition, every encoding kind
// through forward, backward against finite differences, parameter count of Swin-T.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/testing.h"
#include "tests/vit/models/every_encoding.h"
#include "tests/vit/models/model_gradients.h"
#include "vit/models/swin.h"

namespace vitpe {
namespace {

using testing::random_tensor;

// Direct transcription of timm: roll the index image by -shift, pad to a multiple of the
// window with -1, cut windows row-major.
std::vector<int32_t> direct_layout(Grid res, Grid win, int64_t sr, int64_t sc) {
  const int64_t Hp = (res.rows + win.rows - 1) / win.rows * win.rows;
  const int64_t Wp = (res.cols + win.cols - 1) / win.cols * win.cols;
  std::vector<int32_t> rolled(Hp * Wp, -1);
  for (int64_t r = 0; r < res.rows; ++r)
    for (int64_t c = 0; c < res.cols; ++c) {
      // torch.roll(x, -s): out[i] = x[(i + s) % n]
      rolled[r * Wp + c] =
          static_cast<int32_t>(((r + sr) % res.rows) * res.cols + (c + sc) % res.cols);
    }
  std::vector<int32_t> out;
  for (int64_t wr = 0; wr < Hp / win.rows; ++wr)
    for (int64_t wc = 0; wc < Wp / win.cols; ++wc)
      for (int64_t r = 0; r < win.rows; ++r)
        for (int64_t c = 0; c < win.cols; ++c)
          out.push_back(rolled[(wr * win.rows + r) * Wp + wc * win.cols + c]);
  return out;
}

TEST(SwinLayout, MatchesDirectRollPadPartition) {
  for (auto [res, win, sr, sc] :
       std::vector<std::tuple<Grid, Grid, int64_t, int64_t>>{{{8, 8}, {4, 4}, 2, 2},
                                                             {{7, 10}, {3, 4}, 1, 2},
                                                             {{6, 6}, {6, 6}, 0, 0},
                                                             {{9, 5}, {4, 4}, 2, 2}}) {
    WindowLayout l = make_window_layout(res, win, sr, sc);
    EXPECT_EQ(l.source, direct_layout(res, win, sr, sc)) << res.str() << " " << win.str();
  }
}

TEST(SwinLayout, ShiftMaskSeparatesRegions) {
  // 8x8 grid, window 4, shift 2: timm's mask for window 0 is all zero, the last window has
  // four regions.
  WindowLayout l = make_window_layout({8, 8}, {4, 4}, 2, 2);
  ASSERT_TRUE(l.mask.defined());
  ASSERT_EQ(l.mask.shape(), Shape({4, 16, 16}));
  for (int64_t i = 0; i < 16 * 16; ++i) EXPECT_EQ(l.mask.at(i), 0.0f);
  const float* last = l.mask.f32() + 3 * 256;
  // tokens (0,0) and (0,2) of the last window come from different regions
  EXPECT_EQ(last[0 * 16 + 2], -100.0f);
  EXPECT_EQ(last[0 * 16 + 1], 0.0f);
  EXPECT_EQ(last[0 * 16 + 8], -100.0f);
  // symmetric, zero diagonal
  for (int64_t w = 0; w < 4; ++w)
    for (int64_t i = 0; i < 16; ++i) {
      EXPECT_EQ(l.mask.at(w * 256 + i * 17), 0.0f);
      for (int64_t j = 0; j < 16; ++j)
        EXPECT_EQ(l.mask.at(w * 256 + i * 16 + j), l.mask.at(w * 256 + j * 16 + i));
    }
  EXPECT_FALSE(make_window_layout({8, 8}, {4, 4}, 0, 0).mask.defined());
}

TEST(SwinLayout, GatherScatterAreAdjoint) {
  WindowLayout l = make_window_layout({5, 7}, {3, 3}, 1, 1);
  Tensor x = random_tensor({2, 35, 4}, 1);
  Tensor xw = Tensor::empty({2 * l.windows, 9, 4});
  window_gather(xw, x, l);
  Tensor back = Tensor::zeros({2, 35, 4});
  window_scatter_add(back, xw, l);
  EXPECT_EQ(testing::max_rel_error(back, x), 0.0);
}

ModelConfig tiny_swin(const std::string& encoding) {
  ModelConfig c = preset("swin-fmnist");
  c.name = "tiny-swin";
  c.img_rows = 16;
  c.img_cols = 24;  // 8 x 12 patches of 2: two windows of 4 across the rows, three across cols
  c.window = 4;
  c.dim = 8;
  c.depths = {2, 1};
  c.stage_heads = {2, 2};
  c.mlp_ratio = 2.0f;
  c.classes = 3;
  c.encoding = encoding;
  c.labels.clear();
  return c;
}

class SwinEveryEncoding : public ::testing::TestWithParam<std::string> {};

TEST_P(SwinEveryEncoding, ForwardShapeAndFinite) {
  auto model = make_model(tiny_swin(GetParam()), 1);
  EXPECT_EQ(model->num_encoding_params(), testing::params_added_by_encoding(tiny_swin(GetParam())))
      << GetParam();
  Tensor x = random_tensor({3, 1, 16, 24}, 2);
  const Tensor& y = model->forward(x);
  ASSERT_EQ(y.shape(), Shape({3, 3}));
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.at(i)));
}

INSTANTIATE_TEST_SUITE_P(Kinds, SwinEveryEncoding,
                         ::testing::ValuesIn(testing::every_encoding_spec()));

void check_swin_gradients(const std::string& encoding) {
  ModelConfig c = tiny_swin(encoding);
  c.depths = {2, 1};
  auto model = make_model(c, 3);
  testing::check_model_gradients(*model, random_tensor({1, 1, 16, 24}, 4), 6, encoding);
}

TEST(SwinGradients, Relbias) { check_swin_gradients("relbias"); }
TEST(SwinGradients, LearnedAndRope) { check_swin_gradients("rope-mixed+learned1d"); }

TEST(Swin, OddSizesArePadded) {
  auto model = make_model(tiny_swin("relbias"), 1);
  Tensor x = random_tensor({1, 1, 18, 22}, 2);  // 9 x 11 patches: padded windows, odd merge
  const Tensor& y = model->forward(x);
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.at(i)));
}

TEST(Swin, Bf16EmulatedCoversEveryLinear) {
  // Patch merging and the head are linears too: all of them switch, and back again.
  auto model = make_model(tiny_swin("relbias"), 1);
  Tensor x = random_tensor({2, 1, 16, 24}, 2);
  const Tensor f32 = model->forward(x).clone();
  model->set_precision(Precision::bf16_emulated);
  const Tensor low = model->forward(x).clone();
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < f32.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(f32.at(i) - low.at(i))));
    ref = std::max(ref, static_cast<double>(std::abs(f32.at(i))));
  }
  EXPECT_GT(diff / ref, 1e-6);
  EXPECT_LT(diff / ref, 3e-2);
  model->set_precision(Precision::f32);
  const Tensor& again = model->forward(x);
  for (int64_t i = 0; i < f32.numel(); ++i) ASSERT_EQ(again.at(i), f32.at(i));
}

TEST(Swin, TinyPresetParameterCount) {
  // timm's swin_tiny_patch4_window7_224: 28,288,354 parameters.
  auto model = make_model(preset("swin-tiny-patch4-window7-224"), 0);
  EXPECT_EQ(model->num_params(), 28288354);
}

}  // namespace
}  // namespace vitpe
