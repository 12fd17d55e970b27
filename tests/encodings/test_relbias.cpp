// relbias: the index equals timm's formula on non-square windows (naive loop), BEiT's class
// entries, the table gradient equals the scatter-sum of dbias (naive), bias_backward at another
// window against finite differences (resize=bicubic and beit), resampling against the PyTorch
// golden (bicubic) and timm's BEiT resize_rel_pos_bias_table (beit), identity at the same window,
// the option resize in the factory, and the prefix error.
#include <nlohmann/json.hpp>

#include "encodings/encoding.h"
#include "golden.h"
#include "tests/testing.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

std::unique_ptr<AttentionEncoding> make_relbias(int64_t heads, Grid w, int64_t prefix,
                                                const std::string& spec = "relbias") {
  Rng rng(1);
  return make_attention_encoding(parse_encoding(spec), heads, 8, w, prefix, rng);
}

// timm's formula (idx = (y_i - y_j + Mh - 1)(2Mw - 1) + x_i - x_j + Mw - 1), written out
// independently.
int64_t facts_index(int64_t i, int64_t j, Grid w) {
  int64_t yi = i / w.cols, xi = i % w.cols, yj = j / w.cols, xj = j % w.cols;
  return (yi - yj + w.rows - 1) * (2 * w.cols - 1) + (xi - xj + w.cols - 1);
}

TEST(RelBias, IndexMatchesFormulaOnNonSquareWindows) {
  for (Grid w : {Grid{3, 5}, Grid{4, 2}, Grid{1, 6}})
    for (int64_t prefix : {0, 1, 2}) {
      const int64_t H = 2, N = prefix + w.count(), L = (2 * w.rows - 1) * (2 * w.cols - 1);
      auto e = make_relbias(H, w, prefix);
      Param* p = e->params()[0];
      EXPECT_EQ(p->name, "attn.relative_position_bias_table");
      ASSERT_EQ(p->value.shape(), Shape({L + (prefix > 0 ? 3 : 0), H}));
      // Encode the row index in the table so the bias reveals which row was read.
      for (int64_t r = 0; r < p->value.size(0); ++r)
        for (int64_t h = 0; h < H; ++h) p->value.at(r * H + h) = static_cast<float>(r * 10 + h);
      Tensor b = Tensor::empty({H, N, N});
      e->bias(b, {w, prefix});
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < N; ++j) {
            int64_t want = i < prefix
                               ? (j < prefix ? L + 2 : L)
                               : (j < prefix ? L + 1 : facts_index(i - prefix, j - prefix, w));
            ASSERT_EQ(b.at((h * N + i) * N + j), static_cast<float>(want * 10 + h))
                << w.str() << " prefix " << prefix << " i " << i << " j " << j;
          }
    }
}

TEST(RelBias, GradientIsScatterSum) {
  Grid w{3, 4};
  const int64_t H = 3, P = 1, N = P + w.count(), L = 35;
  auto e = make_relbias(H, w, P);
  Tensor d = testing::random_tensor({H, N, N}, 4);
  Param* p = e->params()[0];
  p->grad.zero();
  e->bias_backward(d, {w, P});
  std::vector<double> want((L + 3) * H, 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        int64_t r = i == 0 ? (j == 0 ? L + 2 : L) : (j == 0 ? L + 1 : facts_index(i - 1, j - 1, w));
        want[r * H + h] += d.at((h * N + i) * N + j);
      }
  for (int64_t k = 0; k < (L + 3) * H; ++k) EXPECT_NEAR(p->grad.at(k), want[k], 1e-5);
}

TEST(RelBias, BackwardAtAnotherWindowMatchesFiniteDifferences) {
  Grid built{3, 2}, used{4, 3};
  const int64_t H = 2, P = 1, N = P + used.count();
  auto e = make_relbias(H, built, P);
  Tensor w = testing::random_tensor({H, N, N}, 6);
  Param* p = e->params()[0];
  p->grad.zero();
  e->bias_backward(w, {used, P});
  auto loss = [&] {
    Tensor b = Tensor::empty({H, N, N});
    e->bias(b, {used, P});
    return testing::weighted_sum(b, w);
  };
  Tensor num = testing::numeric_grad(p->value, loss);
  EXPECT_LT(testing::max_rel_error(p->grad, num), 1e-3);
}

TEST(RelBias, ResampleMatchesTorchAndSameWindowIsIdentity) {
  for (int i = 0; i < 2; ++i) {
    const std::string n = "relbias_" + std::to_string(i);
    const auto& m = testing::golden_meta(n + "_in");
    Grid old{m.at("old")[0], m.at("old")[1]}, neu{m.at("new")[0], m.at("new")[1]};
    auto e = make_relbias(m.at("heads"), old, 1);
    Param* p = e->params()[0];
    p->value.copy_from(testing::golden(n + "_in"));
    Tensor before = p->value.clone();
    e->resample(old);
    EXPECT_EQ(testing::max_rel_error(p->value, before), 0.0);
    e->resample(neu);
    Tensor want = testing::golden(n + "_out");
    ASSERT_EQ(p->value.shape(), want.shape());
    EXPECT_LT(testing::max_rel_error(p->value, want), 2e-6) << n;
  }
}

TEST(RelBias, BeitResizeBackwardAtAnotherWindowMatchesFiniteDifferences) {
  // Growing (past the geometric offsets' reach in rows), shrinking; with and without class rows.
  for (auto [built, used, P] :
       {std::tuple{Grid{3, 2}, Grid{4, 3}, int64_t{1}}, {Grid{4, 3}, Grid{2, 3}, int64_t{0}}}) {
    const int64_t H = 2, N = P + used.count();
    auto e = make_relbias(H, built, P, "relbias:resize=beit");
    Tensor w = testing::random_tensor({H, N, N}, 6);
    Param* p = e->params()[0];
    p->grad.zero();
    e->bias_backward(w, {used, P});
    auto loss = [&] {
      Tensor b = Tensor::empty({H, N, N});
      e->bias(b, {used, P});
      return testing::weighted_sum(b, w);
    };
    Tensor num = testing::numeric_grad(p->value, loss);
    EXPECT_LT(testing::max_rel_error(p->grad, num), 1e-3) << built.str() << " -> " << used.str();
  }
}

// timm's resize_rel_pos_bias_table (BEiT's checkpoint resize), tests/golden/
// make_beit_resize_goldens.py: 4x4 -> 6x4 with class rows, 4x4 -> 7x7, 7x7 -> 5x5. Both the
// table resample() leaves and the one bias() uses for the other window (terms()) are checked.
TEST(RelBias, BeitResizeMatchesTimm) {
  SafeTensorsFile io = SafeTensorsFile::open(std::string(VITPE_TEST_DATA) +
                                             "/encodings/beit_resize_golden.safetensors");
  const auto golden = nlohmann::json::parse(io.metadata().at("golden"));
  ASSERT_EQ(golden.at("cases").size(), 3u);
  double worst = 0;
  for (size_t c = 0; c < golden.at("cases").size(); ++c) {
    const auto& m = golden.at("cases")[c];
    const Grid old{m.at("old")[0], m.at("old")[1]}, neu{m.at("new")[0], m.at("new")[1]};
    const int64_t H = m.at("heads"), P = m.at("extra").get<int64_t>() > 0 ? 1 : 0;
    const Tensor in = io.get(std::to_string(c) + "/in"), want = io.get(std::to_string(c) + "/out");
    auto e = make_relbias(H, old, P, "relbias:resize=beit");
    Param* p = e->params()[0];
    ASSERT_EQ(p->value.shape(), in.shape()) << "case " << c;
    p->value.copy_from(in);

    const Tensor used = e->terms({neu, P}).relative_table.clone();
    ASSERT_EQ(used.shape(), want.shape()) << "case " << c;
    const double err_used = testing::max_rel_error(used, want);
    EXPECT_LT(err_used, 1e-5) << "case " << c << " bias() table " << m.dump();

    e->resample(neu);
    ASSERT_EQ(p->value.shape(), want.shape()) << "case " << c;
    const double err = testing::max_rel_error(p->value, want);
    EXPECT_LT(err, 1e-5) << "case " << c << " resample() " << m.dump();
    worst = std::max({worst, err, err_used});
  }
  RecordProperty("max_rel_error", std::to_string(worst));
  std::printf("relbias resize=beit vs timm: max relative error %.3g\n", worst);
}

TEST(RelBias, ResizeOption) {
  EXPECT_EQ(parse_encoding("relbias").str(), "relbias");
  EXPECT_EQ(parse_encoding("relbias:resize=beit").str(), "relbias:resize=beit");
  EXPECT_EQ(parse_encoding("learned1d+relbias:resize=bicubic").str(),
            "learned1d+relbias:resize=bicubic");
  const std::string m = testing::message_of([] { parse_encoding("relbias:resize=nearest"); });
  EXPECT_NE(m.find("resize=nearest"), std::string::npos) << m;
  EXPECT_NE(m.find("bicubic|beit"), std::string::npos) << m;
  EXPECT_THROW(parse_encoding("relbias:resize=nearest"), std::invalid_argument);
  for (const auto& k : encoding_kinds())
    if (k.name == "relbias") {
      EXPECT_EQ(k.options, "resize=bicubic (bicubic|beit)");
      EXPECT_NE(k.extension_note.find("resize=beit"), std::string::npos) << k.extension_note;
    }
  // The default is bicubic: the same table as resize=bicubic at another window, and not beit's.
  auto plain = make_relbias(2, {3, 3}, 1),
       bicubic = make_relbias(2, {3, 3}, 1, "relbias:resize=bicubic"),
       beit = make_relbias(2, {3, 3}, 1, "relbias:resize=beit");
  ASSERT_EQ(testing::max_rel_error(plain->params()[0]->value, beit->params()[0]->value), 0.0);
  const Tensor a = plain->terms({{5, 4}, 1}).relative_table;
  EXPECT_EQ(testing::max_rel_error(bicubic->terms({{5, 4}, 1}).relative_table, a), 0.0);
  EXPECT_GT(testing::max_rel_error(beit->terms({{5, 4}, 1}).relative_table, a), 1e-3);
}

TEST(RelBias, PrefixNeedsClassEntries) {
  auto e = make_relbias(2, {2, 2}, 0);
  Tensor b = Tensor::empty({2, 5, 5});
  EXPECT_THROW(e->bias(b, {{2, 2}, 1}), std::invalid_argument);
  Tensor wrong = Tensor::empty({2, 4, 5});
  EXPECT_THROW(e->bias(wrong, {{2, 2}, 0}), ShapeError);
}

}  // namespace
}  // namespace vitpe
