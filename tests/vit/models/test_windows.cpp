// Swin's window layout against a direct transcription of timm's roll / pad / partition, the
// shift mask's regions, and gather / scatter as adjoints.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/testing.h"
#include "vit/models/windows.h"

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
  // dst = base + scatter in one pass: the same bits as copying base and adding.
  Tensor base = random_tensor({2, 35, 4}, 2), added = base.clone(),
         fused = Tensor::full(x.shape(), 7.0f);
  window_scatter_add(added, xw, l);
  window_scatter_add(fused, base, xw, l);
  EXPECT_EQ(testing::max_rel_error(fused, added), 0.0);
  Tensor in_place = base.clone();  // dst may be base itself
  window_scatter_add(in_place, in_place, xw, l);
  EXPECT_EQ(testing::max_rel_error(in_place, added), 0.0);
  Tensor wrong = Tensor::empty({2, 34, 4});
  EXPECT_THROW(window_scatter_add(wrong, base, xw, l), ShapeError);
}

}  // namespace
}  // namespace vitpe
