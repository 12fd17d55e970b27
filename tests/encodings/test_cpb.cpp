// cpb: bias() against a naive double-precision reference written from Swin V2's formula
// (non-square and one-row windows, ref none and set, with and without prefix tokens), against
// timm's WindowAttention (tests/golden/make_cpb_goldens.py), bias_backward against finite
// differences for every parameter, terms() against bias(), options and any window.
#include <cmath>
#include <nlohmann/json.hpp>

#include "encodings/encoding.h"
#include "tests/testing.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

std::unique_ptr<AttentionEncoding> make_cpb(const std::string& spec, int64_t heads, Grid w,
                                            int64_t prefix) {
  Rng rng(1);
  return make_attention_encoding(parse_encoding(spec), heads, 8, w, prefix, rng);
}

Param* param(AttentionEncoding& e, const std::string& name) {
  for (Param* p : e.params())
    if (p->name == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return nullptr;
}

// Values large enough that the bias spreads over (0, 16) and the prefix rows are not zero.
void randomize(AttentionEncoding& e, uint64_t seed) {
  Rng rng(seed);
  for (Param* p : e.params())
    rng.fill_normal(p->value, p->name == "attn.cpb_mlp.0.weight" ? 1.0 : 0.5);
}

// Swin V2's continuous position bias written out from the paper's and timm's formula: the
// offset of two tokens, scaled by the reference (or the window), times 8, log-spaced, the MLP,
// 16 * sigmoid; the prefix entries as they are.
struct Reference {
  Tensor w1, b1, w2, prefix;  // [hidden, 2], [hidden], [H, hidden], [3, H] or undefined
  Grid ref;                   // {0, 0}: the window

  Reference(AttentionEncoding& e, Grid r) : ref(r) {
    w1 = param(e, "attn.cpb_mlp.0.weight")->value;
    b1 = param(e, "attn.cpb_mlp.0.bias")->value;
    w2 = param(e, "attn.cpb_mlp.2.weight")->value;
    for (Param* p : e.params())
      if (p->name == "attn.cpb_prefix_bias") prefix = p->value;
  }

  static double log_spaced(double dist, int64_t ref_side) {
    const double u = 8.0 * dist / std::max<double>(static_cast<double>(ref_side) - 1.0, 1.0);
    return (u > 0 ? 1 : u < 0 ? -1 : 0) * std::log2(std::fabs(u) + 1.0) / std::log2(8.0);
  }

  // The hidden layer's inputs (before relu) for the offset (dy, dx) in window w.
  std::vector<double> pre(int64_t dy, int64_t dx, Grid w) const {
    const Grid r = ref.rows > 0 ? ref : w;
    const double cy = log_spaced(static_cast<double>(dy), r.rows);
    const double cx = log_spaced(static_cast<double>(dx), r.cols);
    std::vector<double> a(b1.numel());
    for (int64_t k = 0; k < b1.numel(); ++k)
      a[k] = w1.at(2 * k) * cy + w1.at(2 * k + 1) * cx + b1.at(k);
    return a;
  }

  double value(int64_t h, int64_t dy, int64_t dx, Grid w) const {
    const std::vector<double> a = pre(dy, dx, w);
    double s = 0;
    for (size_t k = 0; k < a.size(); ++k) s += w2.at(h * b1.numel() + k) * (a[k] > 0 ? a[k] : 0);
    return 16.0 / (1.0 + std::exp(-s));
  }

  // bias [H, N, N] for a window with `prefix` tokens first.
  std::vector<double> bias(int64_t H, Grid w, int64_t P) const {
    const int64_t N = P + w.count();
    std::vector<double> out(H * N * N);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double v;
          if (i < P && j < P) {
            v = prefix.at(2 * H + h);
          } else if (i < P) {
            v = prefix.at(h);
          } else if (j < P) {
            v = prefix.at(H + h);
          } else {
            const int64_t yi = (i - P) / w.cols, xi = (i - P) % w.cols;
            const int64_t yj = (j - P) / w.cols, xj = (j - P) % w.cols;
            v = value(h, yi - yj, xi - xj, w);
          }
          out[(h * N + i) * N + j] = v;
        }
    return out;
  }

  // The smallest |pre-activation| over a window's offsets: how close a relu is to its kink.
  double min_abs_pre(Grid w) const {
    double m = 1e30;
    for (int64_t dy = 1 - w.rows; dy < w.rows; ++dy)
      for (int64_t dx = 1 - w.cols; dx < w.cols; ++dx)
        for (double a : pre(dy, dx, w)) m = std::min(m, std::fabs(a));
    return m;
  }
};

// "RxC" -> the grid, "none" -> {0, 0}.
Grid ref_grid(const std::string& ref) {
  if (ref == "none") return {0, 0};
  return {std::stoll(ref), std::stoll(ref.substr(ref.find('x') + 1))};
}

double max_rel_error(const Tensor& got, const std::vector<double>& want) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < got.numel(); ++i) {
    diff = std::max(diff, std::fabs(got.at(i) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

TEST(Cpb, MatchesNaiveReference) {
  const int64_t H = 3;
  for (const char* ref : {"none", "7x7", "4x9"})
    for (Grid w : {Grid{3, 5}, Grid{1, 4}})
      for (int64_t prefix : {0, 1, 2}) {
        const std::string spec = std::string("cpb:hidden=16,ref=") + ref;
        auto e = make_cpb(spec, H, w, prefix);
        randomize(*e, 3);
        const Reference want(*e, ref_grid(ref));
        // Built with prefix tokens, it also serves geometries without them.
        for (int64_t use : {prefix, int64_t{0}}) {
          const int64_t N = use + w.count();
          Tensor b = Tensor::empty({H, N, N});
          e->bias(b, {w, use});
          EXPECT_LT(max_rel_error(b, want.bias(H, w, use)), 1e-6)
              << spec << " " << w.str() << " prefix " << prefix << " used " << use;
        }
      }
}

TEST(Cpb, MatchesTimmSwinV2) {
  SafeTensorsFile io =
      SafeTensorsFile::open(std::string(VITPE_TEST_DATA) + "/encodings/cpb_golden.safetensors");
  const auto golden = nlohmann::json::parse(io.metadata().at("golden"));
  ASSERT_EQ(golden.at("cases").size(), 4u);
  double worst = 0;
  for (size_t c = 0; c < golden.at("cases").size(); ++c) {
    const auto& m = golden.at("cases")[c];
    const Grid w{m.at("window")[0], m.at("window")[1]};
    const Grid pre{m.at("pretrained_window_size")[0], m.at("pretrained_window_size")[1]};
    const int64_t H = m.at("heads");
    const std::string spec = "cpb:hidden=" + std::to_string(m.at("hidden").get<int>()) +
                             ",ref=" + (pre.rows > 0 ? pre.str() : "none");
    auto e = make_cpb(spec, H, w, 0);
    for (Param* p : e->params()) p->value.copy_from(io.get(std::to_string(c) + "/" + p->name));
    const Tensor want = io.get(std::to_string(c) + "/bias");
    Tensor b = Tensor::empty(want.shape());
    e->bias(b, {w, 0});
    const double err = testing::max_rel_error(b, want);
    EXPECT_LT(err, 1e-5) << spec << " window " << w.str();
    worst = std::max(worst, err);
  }
  RecordProperty("max_rel_error", std::to_string(worst));
  std::printf("cpb vs timm: max relative error %.3g\n", worst);
}

// d(sum(w * bias)) / d(param) by bias_backward vs central differences, at the built window and
// another one. The parameters are drawn until no relu of the MLP sits within the step of its
// kink, where a finite difference measures a mixture of the two slopes.
TEST(Cpb, BackwardMatchesFiniteDifferences) {
  const int64_t H = 3;
  const Grid built{3, 4};
  const double step = 1e-3;
  for (const char* ref : {"none", "5x5"})
    for (int64_t prefix : {0, 1})
      for (Grid used : {built, Grid{2, 5}}) {
        const std::string spec = std::string("cpb:hidden=8,ref=") + ref;
        auto e = make_cpb(spec, H, built, prefix);
        const Grid r = ref_grid(ref);
        uint64_t seed = 10;
        for (randomize(*e, seed); Reference(*e, r).min_abs_pre(used) < 3 * step;)
          randomize(*e, ++seed);
        const AttnGeometry geom{used, prefix};
        const int64_t N = geom.tokens();
        const Tensor w = testing::random_tensor({H, N, N}, 6);
        for (Param* p : e->params()) p->grad.zero();
        e->bias_backward(w, geom);
        auto loss = [&] {
          Tensor b = Tensor::empty({H, N, N});
          e->bias(b, geom);
          return testing::weighted_sum(b, w);
        };
        EXPECT_EQ(e->params().size(), prefix > 0 ? 4u : 3u);
        for (Param* p : e->params()) {
          const Tensor num = testing::numeric_grad(p->value, loss, step);
          EXPECT_LT(testing::max_rel_error(p->grad, num), 2e-3)
              << spec << " prefix " << prefix << " at " << used.str() << ": " << p->name;
        }
      }
}

TEST(Cpb, TermsGiveTheBias) {
  for (int64_t prefix : {0, 1}) {
    const Grid w{3, 5};
    auto e = make_cpb("cpb:hidden=16", 2, w, prefix);
    randomize(*e, 4);
    const AttnGeometry geom{w, prefix};
    const AttentionTerms t = e->terms(geom);
    ASSERT_TRUE(t.relative_table.defined());
    EXPECT_EQ(t.relative_table.shape(), Shape({9 * 5 + (prefix > 0 ? 3 : 0), 2}));
    Tensor from_terms = Tensor::empty({2, geom.tokens(), geom.tokens()});
    attention_terms_bias(from_terms, t);
    Tensor b = Tensor::empty(from_terms.shape());
    e->bias(b, geom);
    EXPECT_EQ(testing::max_rel_error(from_terms, b), 0.0);
    EXPECT_LT(max_rel_error(from_terms, Reference(*e, {0, 0}).bias(2, w, prefix)), 1e-6);
  }
}

TEST(Cpb, OptionsParamsAndInit) {
  EncodingSpec s = parse_encoding("cpb:ref=8x8,hidden=64");
  EXPECT_EQ(s.str(), "cpb:ref=8x8,hidden=64");
  Rng rng(0);
  auto e = make_attention_encoding(s, 4, 8, {4, 4}, 1, rng);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind(), "cpb");
  EXPECT_TRUE(e->has_bias());
  EXPECT_FALSE(e->has_rotation());
  EXPECT_EQ(make_token_encoding(s, 16, {4, 4}, 1, rng), nullptr);
  const std::vector<std::pair<std::string, Shape>> want = {{"attn.cpb_mlp.0.weight", {64, 2}},
                                                           {"attn.cpb_mlp.0.bias", {64}},
                                                           {"attn.cpb_mlp.2.weight", {4, 64}},
                                                           {"attn.cpb_prefix_bias", {3, 4}}};
  ASSERT_EQ(e->params().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Param* p = e->params()[i];
    EXPECT_EQ(p->name, want[i].first);
    EXPECT_EQ(p->value.shape(), want[i].second);
    EXPECT_EQ(p->grad.shape(), want[i].second);
    EXPECT_TRUE(p->no_decay) << p->name;
  }
  // Weights normal(0, .02) (timm's trunc_normal_ at std .02), biases and prefix entries zero.
  for (const Param* p : e->params()) {
    double sq = 0, mx = 0;
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      sq += static_cast<double>(p->value.at(i)) * p->value.at(i);
      mx = std::max(mx, std::fabs(static_cast<double>(p->value.at(i))));
    }
    if (p->name.find("weight") != std::string::npos) {
      EXPECT_NEAR(std::sqrt(sq / static_cast<double>(p->value.numel())), 0.02, 0.006) << p->name;
    } else {
      EXPECT_EQ(mx, 0.0) << p->name;
    }
  }
  // Defaults: hidden 512, ref none; no prefix parameter without prefix tokens.
  auto d = make_attention_encoding(parse_encoding("cpb"), 2, 8, {4, 4}, 0, rng);
  ASSERT_EQ(d->params().size(), 3u);
  EXPECT_EQ(d->params()[0]->value.shape(), Shape({512, 2}));
}

TEST(Cpb, BadOptionsNameTheOption) {
  for (const char* spec : {"cpb:ref=0x3", "cpb:ref=3x", "cpb:ref=big"}) {
    const std::string m = testing::message_of([&] { parse_encoding(spec); });
    EXPECT_NE(m.find("ref="), std::string::npos) << spec << ": " << m;
    EXPECT_THROW(parse_encoding(spec), std::invalid_argument);
  }
  const std::string m = testing::message_of([] { parse_encoding("cpb:hidden=-1"); });
  EXPECT_NE(m.find("hidden=-1"), std::string::npos) << m;
  EXPECT_THROW(parse_encoding("cpb:hidden=-1"), std::invalid_argument);
  Rng rng(0);
  EXPECT_THROW(make_attention_encoding(parse_encoding("cpb:hidden=1.5"), 2, 8, {2, 2}, 0, rng),
               std::invalid_argument);
  auto e = make_cpb("cpb:hidden=4", 2, {2, 2}, 0);
  Tensor b = Tensor::empty({2, 5, 5});
  EXPECT_THROW(e->bias(b, {{2, 2}, 1}), std::invalid_argument);  // no prefix entries
  Tensor wrong = Tensor::empty({2, 4, 5});
  EXPECT_THROW(e->bias(wrong, {{2, 2}, 0}), ShapeError);
}

// Built for 4x4, it serves any window: resample() changes nothing, bias() evaluates the MLP at the
// new window's offsets (rescaled to the same range with ref=none).
TEST(Cpb, AnyWindow) {
  for (const char* ref : {"none", "4x4"}) {
    const std::string spec = std::string("cpb:hidden=32,ref=") + ref;
    auto e = make_cpb(spec, 2, {4, 4}, 1);
    randomize(*e, 5);
    std::vector<Tensor> before;
    for (Param* p : e->params()) before.push_back(p->value.clone());
    e->resample({6, 6});
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_EQ(testing::max_rel_error(e->params()[i]->value, before[i]), 0.0);
    const Grid r = ref_grid(ref);
    for (Grid w : {Grid{6, 6}, Grid{4, 4}, Grid{2, 7}}) {
      Tensor b = Tensor::empty({2, 1 + w.count(), 1 + w.count()});
      e->bias(b, {w, 1});
      EXPECT_LT(max_rel_error(b, Reference(*e, r).bias(2, w, 1)), 1e-6) << spec << " " << w.str();
    }
    // ref=none: the largest offset of every window maps to the same coordinate, 1.
    if (r.rows == 0) {
      Tensor b4 = Tensor::empty({2, 17, 17}), b6 = Tensor::empty({2, 37, 37});
      e->bias(b4, {{4, 4}, 1});
      e->bias(b6, {{6, 6}, 1});
      EXPECT_NEAR(b4.at(1 * 17 + 16), b6.at(1 * 37 + 36), 1e-5);  // token 0 -> last token
    }
    EXPECT_THROW(e->resample({0, 3}), std::invalid_argument);
  }
}

// An optimizer step changes the parameters: the cached table follows.
TEST(Cpb, TableFollowsParameterChanges) {
  auto e = make_cpb("cpb:hidden=8", 2, {3, 3}, 1);
  randomize(*e, 6);
  Tensor b = Tensor::empty({2, 10, 10});
  e->bias(b, {{3, 3}, 1});
  for (Param* p : e->params()) p->value.at(0) += 0.25f;
  e->bias(b, {{3, 3}, 1});
  EXPECT_LT(max_rel_error(b, Reference(*e, {0, 0}).bias(2, {3, 3}, 1)), 1e-6);
}

}  // namespace
}  // namespace vitpe
