// layernorm_forward / layernorm_backward (ops/cpu/layernorm.cpp) against the double reference
// (ops/reference/layernorm.cpp) and central finite differences of a double LayerNorm.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/vec_math.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;

void check_layernorm_forward(const Shape& s, double offset, float eps, uint64_t seed) {
  const int64_t d = s.dim(-1);
  Tensor x = random_tensor(s, seed);
  for (int64_t i = 0; i < x.numel(); ++i) x.at(i) += static_cast<float>(offset);
  Tensor g = random_tensor(Shape{d}, seed + 1);
  Tensor b = random_tensor(Shape{d}, seed + 2);
  Tensor y = Tensor::full(s, 1e9f);
  Tensor mean = Tensor::empty(Shape{x.numel() / d}), rstd = Tensor::empty(Shape{x.numel() / d});
  layernorm_forward(y, mean, rstd, x, g, b, eps);
  ref::LayerNormOut want = ref::layernorm(x, g, b, eps);
  EXPECT_LT(max_rel_error(y, want.y), 1e-5) << s.str() << " offset " << offset;
  EXPECT_LT(max_rel_error(mean, want.mean), 1e-5) << s.str();
  EXPECT_LT(max_rel_error(rstd, want.rstd), 1e-5) << s.str();
  // Inference: mean and rstd may be undefined.
  Tensor none1, none2;
  Tensor y2 = Tensor::empty(s);
  layernorm_forward(y2, none1, none2, x, g, b, eps);
  EXPECT_LT(max_rel_error(y2, want.y), 1e-5);
}

void check_layernorm_shapes() {
  check_layernorm_forward(Shape{3, 197, 384}, 0.0, 1e-6f, 1);  // ViT-S, batch 3
  check_layernorm_forward(Shape{1, 197, 384}, 0.0, 1e-6f, 2);  // batch 1
  check_layernorm_forward(Shape{2, 49, 96}, 0.0, 1e-5f, 3);    // Swin-T stage 0 window
  check_layernorm_forward(Shape{5, 7}, 0.0, 1e-5f, 4);         // odd width
  check_layernorm_forward(Shape{6, 37}, 0.0, 1e-5f, 6);        // tails of 16 and 8 lanes
  check_layernorm_forward(Shape{4, 384}, 10.0, 1e-6f, 5);      // |mean| >> std: no cancellation
}

TEST(LayerNormForward, MatchesReference) { check_layernorm_shapes(); }

// The AVX2 rows on an AVX-512 machine, and the baseline (SSE4.2) rows, which AVX2 machines
// never pick by themselves (on a machine without them, the kernel it has runs again).
TEST(LayerNormForward, EveryKernelMatchesReference) {
  cpu::avx512_allowed() = false;
  check_layernorm_shapes();
  cpu::avx2_allowed() = false;
  check_layernorm_shapes();
  cpu::avx2_allowed() = true;
  cpu::avx512_allowed() = true;
}

// Double LayerNorm of the (float) tensors, for finite differences.
double layernorm_loss(const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& w,
                      float eps) {
  const int64_t d = x.size(-1), m = x.numel() / d;
  double loss = 0;
  for (int64_t r = 0; r < m; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x.at(r * d + i);
    mean /= d;
    for (int64_t i = 0; i < d; ++i) var += (x.at(r * d + i) - mean) * (x.at(r * d + i) - mean);
    var /= d;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < d; ++i) {
      loss += ((x.at(r * d + i) - mean) * rs * g.at(i) + b.at(i)) * w.at(r * d + i);
    }
  }
  return loss;
}

TEST(LayerNormBackward, MatchesFiniteDifferencesAndAccumulates) {
  const float eps = 1e-5f;
  const Shape s{2, 3, 7};
  Tensor x = random_tensor(s, 10);
  Tensor g = random_tensor(Shape{7}, 11);
  Tensor b = random_tensor(Shape{7}, 12);
  Tensor w = random_tensor(s, 13);  // dL/dy
  auto loss = [&] { return layernorm_loss(x, g, b, w, eps); };
  Tensor num_dx = numeric_grad(x, loss);
  Tensor num_dg = numeric_grad(g, loss);
  Tensor num_db = numeric_grad(b, loss);

  Tensor y = Tensor::empty(s), mean = Tensor::empty(Shape{6}), rstd = Tensor::empty(Shape{6});
  layernorm_forward(y, mean, rstd, x, g, b, eps);
  // Gradients start from non-zero values: backward must add.
  Tensor dx = Tensor::full(s, 1.0f), dg = Tensor::full(Shape{7}, 2.0f);
  Tensor db = Tensor::full(Shape{7}, -3.0f);
  layernorm_backward(dx, dg, db, w, x, g, mean, rstd);
  for (int64_t i = 0; i < dx.numel(); ++i) dx.at(i) -= 1.0f;
  for (int64_t i = 0; i < 7; ++i) {
    dg.at(i) -= 2.0f;
    db.at(i) += 3.0f;
  }
  EXPECT_LT(max_rel_error(dx, num_dx), 1e-5);
  EXPECT_LT(max_rel_error(dg, num_dg), 1e-5);
  EXPECT_LT(max_rel_error(db, num_db), 1e-5);

  // Undefined gradients are skipped; the others are unchanged by their absence.
  Tensor none1, none2;
  Tensor dx2 = Tensor::zeros(s);
  layernorm_backward(dx2, none1, none2, w, x, g, mean, rstd);
  EXPECT_LT(max_rel_error(dx2, num_dx), 1e-5);
}

// The parameter gradients sum over many rows in blocks of rows: compare with a double sum on a
// realistic shape (several blocks, a partial last one), and the same bits (dx, dgamma, dbeta)
// whatever the thread count.
TEST(LayerNormBackward, ParameterGradientsOnLargeShape) {
  const Shape s{3, 197, 200};
  const int64_t m = 3 * 197, d = 200;
  Tensor x = random_tensor(s, 20);
  Tensor g = random_tensor(Shape{d}, 21);
  Tensor b = random_tensor(Shape{d}, 22);
  Tensor dy = random_tensor(s, 23);
  Tensor y = Tensor::empty(s), mean = Tensor::empty(Shape{m}), rstd = Tensor::empty(Shape{m});
  layernorm_forward(y, mean, rstd, x, g, b, 1e-6f);
  Tensor dx, dg = Tensor::zeros(Shape{d}), db = Tensor::zeros(Shape{d});
  layernorm_backward(dx, dg, db, dy, x, g, mean, rstd);
  ref::LayerNormOut r = ref::layernorm(x, g, b, 1e-6f);
  Tensor want_g = Tensor::empty(Shape{d}), want_b = Tensor::empty(Shape{d});
  for (int64_t i = 0; i < d; ++i) {
    double sg = 0, sb = 0;
    for (int64_t row = 0; row < m; ++row) {
      const double xhat = (x.at(row * d + i) - static_cast<double>(r.mean.at(row))) *
                          static_cast<double>(r.rstd.at(row));
      sg += dy.at(row * d + i) * xhat;
      sb += dy.at(row * d + i);
    }
    want_g.at(i) = static_cast<float>(sg);
    want_b.at(i) = static_cast<float>(sb);
  }
  EXPECT_LT(max_rel_error(dg, want_g), 1e-5);
  EXPECT_LT(max_rel_error(db, want_b), 1e-5);

  // With dx in the same pass, on 1, 2 and 3 threads: dx as without the parameters, and the
  // parameter gradients bit for bit the same.
  Tensor dx_only = Tensor::zeros(s), none;
  layernorm_backward(dx_only, none, none, dy, x, g, mean, rstd);
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor dx2 = Tensor::zeros(s), dg2 = Tensor::zeros(Shape{d}), db2 = Tensor::zeros(Shape{d});
    layernorm_backward(dx2, dg2, db2, dy, x, g, mean, rstd);
    EXPECT_EQ(max_rel_error(dx2, dx_only), 0.0) << threads << " threads";
    EXPECT_EQ(max_rel_error(dg2, dg), 0.0) << threads << " threads";
    EXPECT_EQ(max_rel_error(db2, db), 0.0) << threads << " threads";
  }
  set_num_threads(before);
}

// With a residual, dx = residual + the gradient: overwritten (dx starts as NaN), or added when
// the residual is dx itself; the same values as accumulating into a copy of the residual.
TEST(LayerNormBackward, ResidualIsAddedAndDxOverwritten) {
  const Shape s{5, 33, 40};
  const int64_t m = 5 * 33, d = 40;
  Tensor x = random_tensor(s, 30), g = random_tensor(Shape{d}, 31), b = random_tensor(Shape{d}, 32);
  Tensor dy = random_tensor(s, 33), res = random_tensor(s, 34);
  Tensor y = Tensor::empty(s), mean = Tensor::empty(Shape{m}), rstd = Tensor::empty(Shape{m});
  layernorm_forward(y, mean, rstd, x, g, b, 1e-6f);
  Tensor want = res.clone(), dg = Tensor::zeros(Shape{d}), db = Tensor::zeros(Shape{d});
  layernorm_backward(want, dg, db, dy, x, g, mean, rstd);  // res += gradient
  Tensor dx = Tensor::full(s, std::nanf("")), dg2 = Tensor::zeros(Shape{d}),
         db2 = Tensor::zeros(Shape{d});
  layernorm_backward(dx, dg2, db2, dy, x, g, mean, rstd, res);
  EXPECT_EQ(max_rel_error(dx, want), 0.0);
  EXPECT_EQ(max_rel_error(dg2, dg), 0.0);
  EXPECT_EQ(max_rel_error(db2, db), 0.0);
  Tensor same = res.clone(), none;
  layernorm_backward(same, none, none, dy, x, g, mean, rstd, same);
  EXPECT_EQ(max_rel_error(same, want), 0.0);
  Tensor wrong = Tensor::zeros(Shape{5, 33, 41});
  try {
    layernorm_backward(dx, none, none, dy, x, g, mean, rstd, wrong);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("residual"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5, 33, 41]"), std::string::npos) << msg;
  }
}

TEST(LayerNorm, ShapeErrorsNameOpAndShapes) {
  Tensor x = Tensor::zeros(Shape{2, 8});
  Tensor g = Tensor::zeros(Shape{7}), b = Tensor::zeros(Shape{8});
  Tensor y = Tensor::zeros(Shape{2, 8}), none1, none2;
  try {
    layernorm_forward(y, none1, none2, x, g, b, 1e-5f);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layernorm_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[7]"), std::string::npos) << msg;
  }
  Tensor g8 = Tensor::zeros(Shape{8});
  Tensor mean = Tensor::zeros(Shape{3});
  EXPECT_THROW(layernorm_forward(y, mean, none2, x, g8, b, 1e-5f), ShapeError);
}

}  // namespace
}  // namespace vitpe
