// dwconv3x3_forward / dwconv3x3_backward (ops/cpu/dwconv.cpp) against the double reference
// (ops/reference/dwconv.cpp) and central finite differences of that reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::message_of;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

struct DwconvCase {
  int64_t batch, rows, cols, prefix, dim;
};

std::string name(const DwconvCase& c) {
  return std::to_string(c.batch) + " x " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
         " prefix " + std::to_string(c.prefix) + " dim " + std::to_string(c.dim);
}

TEST(DwconvForward, MatchesReference) {
  // Square and non-square grids, a single row and a single column (only some taps exist), the
  // prefix of ViT's class token and of none, channel counts below, at and above one block of the
  // parameter sums, ViT-S/16's shape.
  const DwconvCase cases[] = {{2, 3, 5, 0, 7},    {3, 3, 5, 1, 16}, {1, 1, 9, 1, 8},
                              {2, 9, 1, 0, 5},    {1, 1, 1, 2, 3},  {2, 4, 4, 1, 130},
                              {1, 14, 14, 1, 384}};
  uint64_t seed = 1;
  for (const DwconvCase& c : cases) {
    const Shape s{c.batch, c.prefix + c.rows * c.cols, c.dim};
    Tensor x = random_tensor(s, seed++);
    Tensor w = random_tensor(Shape{c.dim, 3, 3}, seed++, 0.3);
    Tensor b = random_tensor(Shape{c.dim}, seed++);
    Tensor y = Tensor::full(s, 1e9f);
    dwconv3x3_forward(y, x, w, b, c.rows, c.cols, c.prefix);
    EXPECT_LT(max_rel_error(y, ref::dwconv3x3(x, w, b, c.rows, c.cols, c.prefix)), 1e-6) << name(c);
    // The prefix tokens are copied bit for bit.
    for (int64_t i = 0; i < c.batch; ++i)
      for (int64_t j = 0; j < c.prefix * c.dim; ++j)
        ASSERT_EQ(y.at(i * s[1] * c.dim + j), x.at(i * s[1] * c.dim + j)) << name(c);
  }
}

// A weight that is 1 at the centre tap only and a zero bias: y = 2 x on the patches. One tap
// elsewhere shifts the grid, with zeros entering at the border.
TEST(DwconvForward, CentreTapDoublesAndOtherTapsShift) {
  const int64_t rows = 2, cols = 3, D = 2;
  Tensor x = random_tensor(Shape{1, 1 + rows * cols, D}, 5);
  Tensor w = Tensor::zeros(Shape{D, 3, 3}), b = Tensor::zeros(Shape{D});
  for (int64_t d = 0; d < D; ++d) w.at(d * 9 + 4) = 1.0f;
  Tensor y = Tensor::empty(x.shape());
  dwconv3x3_forward(y, x, w, b, rows, cols, 1);
  for (int64_t i = D; i < x.numel(); ++i) EXPECT_FLOAT_EQ(y.at(i), 2 * x.at(i));
  // Tap (u, v) = (1, 2): y(r, c) = x(r, c) + x(r, c + 1), the last column gets only x.
  w.zero();
  for (int64_t d = 0; d < D; ++d) w.at(d * 9 + 5) = 1.0f;
  dwconv3x3_forward(y, x, w, b, rows, cols, 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t t = 1 + r * cols + c;
        const float right = c + 1 < cols ? x.at((t + 1) * D + d) : 0.0f;
        EXPECT_FLOAT_EQ(y.at(t * D + d), x.at(t * D + d) + right) << r << "," << c;
      }
}

// dx, dw, db of sum(g * y) against central differences of the double reference; gradients
// start from non-zero values (backward adds) and undefined ones are skipped.
void check_dwconv_backward(const DwconvCase& c, uint64_t seed) {
  constexpr double kStep = 0.05;  // the output is linear in each: a large step, little rounding
  const Shape s{c.batch, c.prefix + c.rows * c.cols, c.dim};
  Tensor x = random_tensor(s, seed);
  Tensor w = random_tensor(Shape{c.dim, 3, 3}, seed + 1, 0.5);
  Tensor b = random_tensor(Shape{c.dim}, seed + 2);
  Tensor g = random_tensor(s, seed + 3);  // dL/dy
  auto loss = [&] { return weighted_sum(ref::dwconv3x3(x, w, b, c.rows, c.cols, c.prefix), g); };
  Tensor num_dx = numeric_grad(x, loss, kStep);
  Tensor num_dw = numeric_grad(w, loss, kStep);
  Tensor num_db = numeric_grad(b, loss, kStep);

  Tensor dx = Tensor::full(s, 1.0f), dw = Tensor::full(w.shape(), 2.0f);
  Tensor db = Tensor::full(b.shape(), -3.0f);
  dwconv3x3_backward(dx, dw, db, g, x, w, c.rows, c.cols, c.prefix);
  for (int64_t i = 0; i < dx.numel(); ++i) dx.at(i) -= 1.0f;
  for (int64_t i = 0; i < dw.numel(); ++i) dw.at(i) -= 2.0f;
  for (int64_t i = 0; i < db.numel(); ++i) db.at(i) += 3.0f;
  EXPECT_LT(max_rel_error(dx, num_dx), 1e-3) << name(c);
  EXPECT_LT(max_rel_error(dw, num_dw), 1e-3) << name(c);
  EXPECT_LT(max_rel_error(db, num_db), 1e-3) << name(c);

  Tensor none1, none2, dx2 = Tensor::zeros(s);
  dwconv3x3_backward(dx2, none1, none2, g, x, w, c.rows, c.cols, c.prefix);
  EXPECT_LT(max_rel_error(dx2, num_dx), 1e-3) << name(c);
  Tensor no_dx, dw2 = Tensor::zeros(w.shape()), no_db;
  dwconv3x3_backward(no_dx, dw2, no_db, g, x, w, c.rows, c.cols, c.prefix);
  EXPECT_LT(max_rel_error(dw2, num_dw), 1e-3) << name(c);
}

TEST(DwconvBackward, MatchesFiniteDifferences) {
  check_dwconv_backward({2, 3, 5, 1, 4}, 10);
  check_dwconv_backward({1, 3, 5, 0, 3}, 20);
  check_dwconv_backward({2, 1, 6, 1, 2}, 30);
  check_dwconv_backward({1, 4, 1, 2, 3}, 40);
}

// The parameter sums in channel blocks over many tokens: against a double sum on a realistic
// shape (more channels than one block, a partial last block).
TEST(DwconvBackward, ParameterGradientsOnLargeShape) {
  const int64_t B = 3, rows = 14, cols = 14, P = 1, D = 200, N = P + rows * cols;
  Tensor x = random_tensor(Shape{B, N, D}, 50);
  Tensor w = random_tensor(Shape{D, 3, 3}, 51);
  Tensor dy = random_tensor(Shape{B, N, D}, 52);
  Tensor dx, dw = Tensor::zeros(w.shape()), db = Tensor::zeros(Shape{D});
  dwconv3x3_backward(dx, dw, db, dy, x, w, rows, cols, P);
  Tensor want_w = Tensor::empty(w.shape()), want_b = Tensor::empty(Shape{D});
  for (int64_t d = 0; d < D; ++d) {
    double sb = 0, sw[9] = {};
    for (int64_t i = 0; i < B; ++i)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const double g = dy.at((i * N + P + r * cols + c) * D + d);
          sb += g;
          for (int64_t u = 0; u < 3; ++u)
            for (int64_t v = 0; v < 3; ++v) {
              const int64_t rr = r + u - 1, cc = c + v - 1;
              if (rr >= 0 && rr < rows && cc >= 0 && cc < cols)
                sw[u * 3 + v] += g * x.at((i * N + P + rr * cols + cc) * D + d);
            }
        }
    want_b.at(d) = static_cast<float>(sb);
    for (int64_t k = 0; k < 9; ++k) want_w.at(d * 9 + k) = static_cast<float>(sw[k]);
  }
  EXPECT_LT(max_rel_error(dw, want_w), 1e-5);
  EXPECT_LT(max_rel_error(db, want_b), 1e-5);
}

// PEG's convolution at the study's shape (50 images, a 4 x 4 grid with the class token, D 64)
// and a larger one (several channel blocks): forward and backward the same bits on 1, 2 and 3
// threads.
TEST(Dwconv, SameBitsOnAnyThreadCount) {
  const int before = num_threads();
  for (const DwconvCase& c : {DwconvCase{50, 4, 4, 1, 64}, DwconvCase{8, 14, 14, 1, 200}}) {
    const int64_t N = c.prefix + c.rows * c.cols;
    Tensor x = random_tensor(Shape{c.batch, N, c.dim}, 60);
    Tensor w = random_tensor(Shape{c.dim, 3, 3}, 61), b = random_tensor(Shape{c.dim}, 62);
    Tensor dy = random_tensor(x.shape(), 63);
    std::vector<Tensor> first;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Tensor y = Tensor::empty(x.shape()), dx = Tensor::zeros(x.shape());
      Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros(b.shape());
      dwconv3x3_forward(y, x, w, b, c.rows, c.cols, c.prefix);
      dwconv3x3_backward(dx, dw, db, dy, x, w, c.rows, c.cols, c.prefix);
      const std::vector<Tensor> now = {y, dx, dw, db};
      if (threads == 1) first = now;
      for (size_t i = 0; i < now.size(); ++i) {
        EXPECT_EQ(max_rel_error(now[i], first[i]), 0.0)
            << "output " << i << ", " << name(c) << ", " << threads << " threads";
      }
    }
  }
  set_num_threads(before);
}

TEST(Dwconv, ShapeErrorsNameOpAndShapes) {
  const int64_t D = 4;
  Tensor x = Tensor::zeros(Shape{2, 1 + 6, D}), y = Tensor::zeros(x.shape());
  Tensor w = Tensor::zeros(Shape{D, 3, 3}), b = Tensor::zeros(Shape{D});
  // Token count is not prefix + rows * cols.
  std::string m = message_of([&] { dwconv3x3_forward(y, x, w, b, 3, 3, 1); });
  EXPECT_NE(m.find("dwconv3x3_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("[B, 10, D]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 7, 4]"), std::string::npos) << m;
  // A weight of PyTorch's 4-d shape, a bias of the wrong length, an output of another shape.
  Tensor w4 = Tensor::zeros(Shape{D, 1, 3, 3});
  m = message_of([&] { dwconv3x3_forward(y, x, w4, b, 2, 3, 1); });
  EXPECT_NE(m.find("w"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 1, 3, 3]"), std::string::npos) << m;
  Tensor b5 = Tensor::zeros(Shape{5});
  EXPECT_THROW(dwconv3x3_forward(y, x, w, b5, 2, 3, 1), ShapeError);
  Tensor y2 = Tensor::zeros(Shape{2, 7, D + 1});
  EXPECT_THROW(dwconv3x3_forward(y2, x, w, b, 2, 3, 1), ShapeError);
  // In place is refused: the convolution reads neighbours already overwritten.
  m = message_of([&] { dwconv3x3_forward(x, x, w, b, 2, 3, 1); });
  EXPECT_NE(m.find("alias"), std::string::npos) << m;
  EXPECT_THROW(dwconv3x3_forward(y, x, w, b, 0, 7, 0), ShapeError);
  // Backward: dy and the gradients must match x and w.
  Tensor dy = Tensor::zeros(Shape{2, 7, D + 1}), dx = Tensor::zeros(x.shape());
  Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros(b.shape());
  m = message_of([&] { dwconv3x3_backward(dx, dw, db, dy, x, w, 2, 3, 1); });
  EXPECT_NE(m.find("dwconv3x3_backward"), std::string::npos) << m;
  EXPECT_NE(m.find("dy"), std::string::npos) << m;
  Tensor dw_bad = Tensor::zeros(Shape{D, 9});
  Tensor good_dy = Tensor::zeros(x.shape());
  EXPECT_THROW(dwconv3x3_backward(dx, dw_bad, db, good_dy, x, w, 2, 3, 1), ShapeError);
}

}  // namespace
}  // namespace vitpe
