// CUDA window partition/merge with cyclic shift (ops/cuda/windows.cu) against torch.roll +
// timm's window_partition written as index loops; merge inverts partition exactly.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_testing.h"

namespace vitpe {
namespace {

using namespace cudatest;

// torch.roll(x, (-sr, -sc), dims=(1, 2)) then window_partition, on x [B, R*C, D].
Tensor partition_ref(const Tensor& x, int64_t R, int64_t C, int64_t Mh, int64_t Mw, int64_t sr,
                     int64_t sc) {
  const int64_t B = x.size(0), D = x.size(2), nWy = R / Mh, nWx = C / Mw;
  Tensor rolled = Tensor::empty(x.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d)  // roll by -s: out[i] = x[(i + s) mod n]
          rolled.at(((b * R + r) * C + c) * D + d) =
              x.at(((b * R + (r + sr) % R) * C + (c + sc) % C) * D + d);
  Tensor out = Tensor::empty(Shape{B * nWy * nWx, Mh * Mw, D});
  int64_t o = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t wy = 0; wy < nWy; ++wy)
      for (int64_t wx = 0; wx < nWx; ++wx)
        for (int64_t ty = 0; ty < Mh; ++ty)
          for (int64_t tx = 0; tx < Mw; ++tx)
            for (int64_t d = 0; d < D; ++d)
              out.at(o++) = rolled.at(((b * R + wy * Mh + ty) * C + wx * Mw + tx) * D + d);
  return out;
}

TEST(CudaWindows, PartitionWithShiftAndMergeBack) {
  VITPE_REQUIRE_CUDA();
  struct Case {
    int64_t B, R, C, Mh, Mw, sr, sc;
  };
  for (Case c :
       {Case{3, 14, 14, 7, 7, 0, 0}, Case{3, 14, 14, 7, 7, 3, 3}, Case{1, 8, 12, 4, 3, 2, 1}})
    for (DType t : {DType::f32, DType::bf16}) {
      const int64_t D = 5, nW = (c.R / c.Mh) * (c.C / c.Mw);
      Tensor x = rounded(testing::random_tensor(Shape{c.B, c.R * c.C, D}, 1), t);
      Tensor win = poisoned(Shape{c.B * nW, c.Mh * c.Mw, D}, t);
      Tensor xd = upload(x, t);
      cuda::window_partition_forward(win, xd, c.R, c.C, c.Mh, c.Mw, c.sr, c.sc);
      Tensor want = partition_ref(x, c.R, c.C, c.Mh, c.Mw, c.sr, c.sc), got = download(win);
      for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.at(i), want.at(i)) << i;
      Tensor back = poisoned(x.shape(), t);
      cuda::window_merge_forward(back, win, c.R, c.C, c.Mh, c.Mw, c.sr, c.sc);
      Tensor bh = download(back);
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(bh.at(i), x.at(i)) << i;
    }
}

TEST(CudaWindows, RejectsIndivisibleGrid) {
  VITPE_REQUIRE_CUDA();
  Tensor x = Tensor::zeros(Shape{1, 100, 4}, DType::f32, Device::cuda);
  Tensor w = Tensor::zeros(Shape{4, 25, 4}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::window_partition_forward(w, x, 10, 10, 7, 7), ShapeError);
}

}  // namespace
}  // namespace vitpe
