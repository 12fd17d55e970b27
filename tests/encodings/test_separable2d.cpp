// separable2d: sum and concat layouts against a naive reference, prefix rows learned, linear
// resampling per axis against naive linear interpolation, identity at the same grid, and
// backward against finite differences (built grid and another grid).
#include "encodings/encoding.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

std::unique_ptr<TokenEncoding> make_separable2d(const std::string& spec, Grid g, int64_t prefix,
                                                int64_t dim = 8) {
  Rng rng(3);
  return make_token_encoding(parse_encoding(spec), dim, g, prefix, rng);
}

Param* find(TokenEncoding& e, const std::string& name) {
  for (Param* p : e.params())
    if (p->name == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return nullptr;
}

TEST(Separable2d, SumAndConcatLayouts) {
  for (bool concat : {false, true}) {
    auto e = make_separable2d(concat ? "separable2d:mode=concat" : "separable2d", {3, 4}, 1);
    Param* row = find(*e, "pos_embed_row");
    Param* col = find(*e, "pos_embed_col");
    Param* pre = find(*e, "pos_embed_prefix");
    const int64_t w = concat ? 4 : 8;
    EXPECT_EQ(row->value.shape(), Shape({3, w}));
    EXPECT_EQ(col->value.shape(), Shape({4, w}));
    EXPECT_EQ(pre->value.shape(), Shape({1, 8}));
    Tensor t = e->table({3, 4});
    for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(t.at(j), pre->value.at(j));
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t j = 0; j < 8; ++j) {
          float want = concat ? (j < 4 ? row->value.at(r * 4 + j) : col->value.at(c * 4 + j - 4))
                              : row->value.at(r * 8 + j) + col->value.at(c * 8 + j);
          EXPECT_EQ(t.at((1 + r * 4 + c) * 8 + j), want);
        }
  }
  EXPECT_THROW(make_separable2d("separable2d:mode=concat", {2, 2}, 0, 7), std::invalid_argument);
}

TEST(Separable2d, ResampleIsLinearPerAxis) {
  auto e = make_separable2d("separable2d", {3, 4}, 0);
  Tensor row = find(*e, "pos_embed_row")->value.clone();
  Tensor same = e->table({3, 4});
  e->resample({3, 4});
  EXPECT_EQ(testing::max_rel_error(e->table({3, 4}), same), 0.0);
  e->resample({5, 4});  // rows 3 -> 5: source y = 0.6 (i + 0.5) - 0.5, clamped at the ends
  Tensor r2 = find(*e, "pos_embed_row")->value;
  for (int64_t i = 0; i < 5; ++i) {
    double y = std::clamp(0.6 * (i + 0.5) - 0.5, 0.0, 2.0);
    int64_t y0 = std::min<int64_t>(static_cast<int64_t>(y), 1);
    double f = y - y0;
    for (int64_t j = 0; j < 8; ++j)
      EXPECT_NEAR(r2.at(i * 8 + j), (1 - f) * row.at(y0 * 8 + j) + f * row.at((y0 + 1) * 8 + j),
                  1e-6);
  }
}

void check_separable2d_backward(const std::string& spec, Grid built, Grid used, int64_t prefix) {
  auto e = make_separable2d(spec, built, prefix);
  const int64_t n = prefix + used.count();
  Tensor w = testing::random_tensor({2, n, 8}, 11);
  for (Param* p : e->params()) p->grad.zero();
  e->backward(w, used);
  auto loss = [&] {
    Tensor x = Tensor::zeros({2, n, 8});
    e->forward(x, used);
    return testing::weighted_sum(x, w);
  };
  for (Param* p : e->params()) {
    Tensor num = testing::numeric_grad(p->value, loss);
    EXPECT_LT(testing::max_rel_error(p->grad, num), 1e-3)
        << spec << " " << p->name << " built " << built.str() << " used " << used.str();
  }
}

TEST(Separable2d, BackwardMatchesFiniteDifferences) {
  check_separable2d_backward("separable2d", {3, 4}, {3, 4}, 1);
  check_separable2d_backward("separable2d:mode=concat", {3, 4}, {3, 4}, 2);
  check_separable2d_backward("separable2d", {3, 4}, {5, 2}, 1);
  check_separable2d_backward("separable2d:mode=concat", {4, 3}, {2, 6}, 0);
}

}  // namespace
}  // namespace vitpe
