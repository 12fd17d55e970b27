// peg (CPVT's positional encoding generator): names, shapes and PyTorch's Conv2d init; forward
// is the op x + DWConv3x3(x) on the patch tokens (the double reference) with the prefix
// untouched, at the built grid and another; backward against finite differences for the tokens
// and both parameters; spec parsing and its option's errors.
#include <cmath>

#include "encodings/encoding.h"
#include "ops/reference.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::message_of;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

std::unique_ptr<ConditionalEncoding> make_peg(const std::string& spec, int64_t dim, Grid g,
                                              int64_t prefix, uint64_t seed = 0) {
  Rng rng(seed);
  return make_conditional_encoding(parse_encoding(spec), dim, g, prefix, rng);
}

Tensor kernel(const Param& weight) { return weight.value.reshape({weight.value.size(0), 3, 3}); }

TEST(Peg, NamesShapesAndConv2dInit) {
  auto e = make_peg("peg", 192, {14, 14}, 1);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind(), "peg");
  EXPECT_EQ(e->after_block(), 1);  // CPVT's placement: after the first block
  auto p = e->params();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0]->name, "pos_block.proj.weight");
  EXPECT_EQ(p[0]->value.shape(), Shape({192, 1, 3, 3}));  // PyTorch's Conv2d(D, D, 3, groups=D)
  EXPECT_FALSE(p[0]->no_decay);
  EXPECT_EQ(p[1]->name, "pos_block.proj.bias");
  EXPECT_EQ(p[1]->value.shape(), Shape({192}));
  EXPECT_TRUE(p[1]->no_decay);
  // kaiming_uniform_(a=sqrt(5)) and the bias's default: uniform in +-1/sqrt(fan_in = 9), whose
  // standard deviation is (1/3)/sqrt(3).
  for (Param* q : p) {
    double s2 = 0, mx = 0;
    for (int64_t i = 0; i < q->value.numel(); ++i) {
      s2 += q->value.at(i) * q->value.at(i);
      mx = std::max(mx, std::fabs(static_cast<double>(q->value.at(i))));
    }
    EXPECT_LE(mx, 1.0 / 3.0) << q->name;
    EXPECT_GT(mx, 0.9 / 3.0) << q->name;
    EXPECT_NEAR(std::sqrt(s2 / q->value.numel()), 1.0 / 3.0 / std::sqrt(3.0), 0.02) << q->name;
    EXPECT_EQ(q->grad.shape(), q->value.shape()) << q->name;
  }
  // Other encodings: no conditional part.
  Rng rng(0);
  EXPECT_EQ(make_conditional_encoding(parse_encoding("sincos2d"), 16, {3, 4}, 1, rng), nullptr);
  EXPECT_EQ(make_conditional_encoding(parse_encoding("none"), 16, {3, 4}, 1, rng), nullptr);
}

// The encoding is the op: the double reference of x + DWConv3x3(x) on the patch tokens, the
// prefix tokens bit for bit, at the grid it was built for and at another (no extension rule).
TEST(Peg, ForwardIsTheConvolutionOnThePatchTokens) {
  for (const int64_t prefix : {0, 1, 3}) {
    auto e = make_peg("peg", 8, {3, 5}, prefix, 4);
    const Param& w = *e->params()[0];
    const Param& b = *e->params()[1];
    for (const Grid g : {Grid{3, 5}, Grid{1, 7}, Grid{4, 4}}) {
      Tensor x = random_tensor({2, prefix + g.count(), 8}, 5), orig = x.clone();
      e->forward(x, g);
      const Tensor want = ref::dwconv3x3(orig, kernel(w), b.value, g.rows, g.cols, prefix);
      EXPECT_LT(max_rel_error(x, want), 1e-6) << g.str() << " prefix " << prefix;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < prefix * 8; ++j)
          ASSERT_EQ(x.at(i * x.size(1) * 8 + j), orig.at(i * x.size(1) * 8 + j));
    }
  }
  auto e = make_peg("peg", 8, {3, 5}, 1);
  Tensor wrong = Tensor::zeros({2, 15, 8});  // the class token missing
  const std::string m = message_of([&] { e->forward(wrong, {3, 5}); });
  EXPECT_NE(m.find("peg forward"), std::string::npos) << m;
  EXPECT_NE(m.find("[B, 16, 8]"), std::string::npos) << m;
}

// backward turns the output's gradient into the input's (in place) and accumulates the
// parameters' gradients: against central differences of sum(g * forward(x)).
TEST(Peg, BackwardMatchesFiniteDifferences) {
  constexpr double kStep = 0.05;  // the output is linear in each: a large step, little rounding
  const int64_t D = 3, P = 1;
  for (const Grid g : {Grid{3, 4}, Grid{1, 5}}) {
    auto e = make_peg("peg", D, {3, 4}, P, 7);
    Param& w = *e->params()[0];
    Param& b = *e->params()[1];
    Tensor x = random_tensor({2, P + g.count(), D}, 8);
    const Tensor gy = random_tensor(x.shape(), 9);
    auto loss = [&] {
      Tensor y = x.clone();
      e->forward(y, g);
      return weighted_sum(y, gy);
    };
    const Tensor num_dx = numeric_grad(x, loss, kStep);
    const Tensor num_dw = numeric_grad(w.value, loss, kStep);
    const Tensor num_db = numeric_grad(b.value, loss, kStep);

    Tensor y = x.clone();
    e->forward(y, g);
    w.grad.fill(0.5f);  // backward adds into the parameters' gradients
    b.grad.fill(-1.0f);
    Tensor d = gy.clone();
    e->backward(d, g);
    for (int64_t i = 0; i < w.grad.numel(); ++i) w.grad.at(i) -= 0.5f;
    for (int64_t i = 0; i < b.grad.numel(); ++i) b.grad.at(i) += 1.0f;
    EXPECT_LT(max_rel_error(d, num_dx), 1e-3) << g.str();
    EXPECT_LT(max_rel_error(w.grad, num_dw), 1e-3) << g.str();
    EXPECT_LT(max_rel_error(b.grad, num_db), 1e-3) << g.str();
    // The prefix token's gradient passes unchanged.
    for (int64_t j = 0; j < P * D; ++j) EXPECT_EQ(d.at(j), gy.at(j));
  }
  // A backward at a grid it did not run forward on is an error, not a wrong gradient.
  auto e = make_peg("peg", D, {3, 4}, P);
  Tensor t = random_tensor({1, P + 12, D}, 1);
  e->forward(t, {3, 4});
  Tensor d6 = Tensor::zeros({1, P + 12, D});
  EXPECT_THROW(e->backward(d6, {4, 3}), std::logic_error);
}

TEST(Peg, SpecsCombineWithTokenAndAttentionKinds) {
  EXPECT_EQ(make_peg("peg:after=0", 8, {2, 2}, 1)->after_block(), 0);
  EXPECT_EQ(make_peg("peg:after=3", 8, {2, 2}, 1)->after_block(), 3);
  for (const std::string spec :
       {"peg+relbias", "sincos2d+peg", "learned1d+peg:after=0+rope-mixed"}) {
    const EncodingSpec s = parse_encoding(spec);
    EXPECT_EQ(s.str(), spec);
    Rng rng(0);
    auto c = make_conditional_encoding(s, 16, {3, 4}, 1, rng);
    ASSERT_NE(c, nullptr) << spec;
    EXPECT_EQ(c->kind(), "peg");
    const bool token =
        spec.find("sincos2d") != std::string::npos || spec.find("learned1d") != std::string::npos;
    EXPECT_EQ(make_token_encoding(s, 16, {3, 4}, 1, rng) != nullptr, token) << spec;
    EXPECT_EQ(make_attention_encoding(s, 2, 8, {3, 4}, 1, rng) != nullptr,
              !token || spec.find("rope") != std::string::npos)
        << spec;
  }
  // One conditional part at most, and none stands alone.
  std::string m = message_of([] { parse_encoding("peg+peg:after=0"); });
  EXPECT_NE(m.find("two conditional-site parts"), std::string::npos) << m;
  EXPECT_THROW(parse_encoding("none+peg"), std::invalid_argument);
}

TEST(Peg, BadOptionsNameWhatIsAccepted) {
  for (const std::string bad : {"peg:after=-1", "peg:after=1.5", "peg:after=x", "peg:after="}) {
    const std::string m = message_of([&] { parse_encoding(bad); });
    EXPECT_NE(m.find("peg: option after="), std::string::npos) << bad << ": " << m;
    EXPECT_NE(m.find("whole number >= 0"), std::string::npos) << bad << ": " << m;
  }
  const std::string m = message_of([] { parse_encoding("peg:kernel=5"); });
  EXPECT_NE(m.find("unknown option 'kernel'"), std::string::npos) << m;
  EXPECT_NE(m.find("after=<whole number >= 0> (default 1)"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
