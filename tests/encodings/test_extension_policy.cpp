// ExtensionRule policies: every kind meets another grid by interpolation (coordinates
// rescaled into the built range) or extrapolation (integer coordinates past it; learned tables
// hold their edges), chosen at evaluation time. Checked per kind against what the rule means,
// written here independently of the kinds' code: at the built grid the policy changes nothing;
// interpolating to a grid twice as large puts token (2r, 2c) where (r, c) was; extrapolating a
// learned table repeats its edges (relative tables clamp offsets); backward through each new
// path against finite differences; and the model-level switch with the rules it reports.
#include <algorithm>
#include <cmath>
#include <set>

#include "encodings/encoding.h"
#include "encodings/tables.h"
#include "tests/testing.h"
#include "tests/tiny_vit.h"
#include "vit/models/model.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_tensor;
using testing::weighted_sum;

std::unique_ptr<TokenEncoding> token(const std::string& spec, Grid g, int64_t prefix,
                                     int64_t dim = 16) {
  Rng rng(3);
  return make_token_encoding(parse_encoding(spec), dim, g, prefix, rng);
}

std::unique_ptr<AttentionEncoding> attention(const std::string& spec, Grid w, int64_t prefix,
                                             int64_t heads = 2, int64_t hd = 8) {
  Rng rng(4);
  return make_attention_encoding(parse_encoding(spec), heads, hd, w, prefix, rng);
}

// Patch row n of a table [prefix + rows*cols, D] for patch (r, c).
float at(const Tensor& table, int64_t prefix, Grid g, int64_t r, int64_t c, int64_t d) {
  return table.at((prefix + r * g.cols + c) * table.size(1) + d);
}

TEST(ExtensionPolicy, NamesParseAndResolve) {
  EXPECT_EQ(parse_policy("interpolate"), ExtensionPolicy::interpolate);
  EXPECT_EQ(parse_policy("interp"), ExtensionPolicy::interpolate);
  EXPECT_EQ(parse_policy("extrapolate"), ExtensionPolicy::extrapolate);
  EXPECT_EQ(parse_policy("native"), ExtensionPolicy::native);
  try {
    parse_policy("nearest");
    FAIL() << "accepted an unknown policy";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'nearest'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("interpolate"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(policy_name(ExtensionPolicy::extrapolate), "extrapolate");
  EXPECT_EQ(resolve_rule(ExtensionPolicy::native, ExtensionRule::interpolate),
            ExtensionRule::interpolate);
  EXPECT_EQ(resolve_rule(ExtensionPolicy::extrapolate, ExtensionRule::interpolate),
            ExtensionRule::extrapolate);
  EXPECT_EQ(resolve_rule(ExtensionPolicy::interpolate, ExtensionRule::none), ExtensionRule::none);
  // centre and ntk: their own rules only where the kind can tell them apart.
  EXPECT_EQ(parse_policy("centre"), ExtensionPolicy::centre);
  EXPECT_EQ(parse_policy("center"), ExtensionPolicy::centre);
  EXPECT_EQ(parse_policy("ntk"), ExtensionPolicy::ntk);
  EXPECT_STREQ(policy_name(ExtensionPolicy::centre), "centre");
  EXPECT_STREQ(policy_name(ExtensionPolicy::ntk), "ntk");
  EXPECT_STREQ(rule_name(ExtensionRule::ntk), "ntk");
  EXPECT_EQ(resolve_rule(ExtensionPolicy::centre, ExtensionRule::interpolate, {.absolute = true}),
            ExtensionRule::centre);
  EXPECT_EQ(resolve_rule(ExtensionPolicy::centre, ExtensionRule::interpolate),
            ExtensionRule::extrapolate);
  EXPECT_EQ(resolve_rule(ExtensionPolicy::ntk, ExtensionRule::interpolate, {.frequencies = true}),
            ExtensionRule::ntk);
  EXPECT_EQ(resolve_rule(ExtensionPolicy::ntk, ExtensionRule::interpolate),
            ExtensionRule::interpolate);
  EXPECT_EQ(resolve_rule(ExtensionPolicy::ntk, ExtensionRule::none, {.frequencies = true}),
            ExtensionRule::none);
  // ntk's factor: 1 for the highest frequency, 1/s for the lowest, geometric between.
  EXPECT_EQ(ntk_scale(0, 4, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(ntk_scale(3, 4, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(ntk_scale(1, 4, 8.0), 0.5);
  EXPECT_DOUBLE_EQ(ntk_scale(2, 3, 0.5), 2.0);
  EXPECT_EQ(ntk_scale(0, 1, 2.0), 1.0);
  EXPECT_EQ(ntk_scale(2, 4, 1.0), 1.0);
  EXPECT_EQ(centre_offset(3, 7), 2);
  EXPECT_EQ(centre_offset(4, 2), -1);
}

// Which kinds have rules of their own under centre and ntk, and that each says so in its note:
// the absolute tables centre, the integer-coordinate frequency ladders ntk; every other kind with
// a grid-dependent part extrapolates under centre and keeps its own rule under ntk.
TEST(ExtensionPolicy, CentreAndNtkAreRulesOfTheKindsThatCanTellThem) {
  const std::set<std::string> absolute{"learned1d", "separable2d", "sincos2d"};
  const std::set<std::string> ladders{"sincos2d", "rope-axial", "rope-mixed"};
  for (const EncodingKindInfo& k : encoding_kinds()) {
    if (k.site != EncodingSite::token && k.site != EncodingSite::attention) continue;
    auto rules = [&](ExtensionPolicy p) {
      if (k.site == EncodingSite::token) {
        auto e = token(k.name, {3, 4}, 1);
        e->set_extension_policy(p);
        return e->extension_rule();
      }
      auto e = attention(k.name, {3, 4}, 1);
      e->set_extension_policy(p);
      return e->extension_rule();
    };
    const ExtensionRule centre = rules(ExtensionPolicy::centre), ntk = rules(ExtensionPolicy::ntk);
    if (k.extension == ExtensionRule::none) {
      EXPECT_EQ(centre, ExtensionRule::none) << k.name;
      EXPECT_EQ(ntk, ExtensionRule::none) << k.name;
      continue;
    }
    EXPECT_EQ(centre, absolute.count(k.name) ? ExtensionRule::centre : ExtensionRule::extrapolate)
        << k.name;
    EXPECT_EQ(ntk, ladders.count(k.name) ? ExtensionRule::ntk : k.extension) << k.name;
    if (absolute.count(k.name)) {
      EXPECT_NE(k.extension_note.find("centre"), std::string::npos) << k.name;
    }
    if (ladders.count(k.name)) {
      EXPECT_NE(k.extension_note.find("ntk"), std::string::npos) << k.name;
    }
  }
}

// The rule a built part reports under the native policy is the registry's, for every kind, and
// the two policies give the two rules wherever the kind depends on the grid.
TEST(ExtensionPolicy, EveryKindReportsItsRegistryRuleAndBothPolicies) {
  for (const EncodingKindInfo& k : encoding_kinds()) {
    ExtensionRule native = ExtensionRule::none, interp = ExtensionRule::none,
                  extrap = ExtensionRule::none;
    if (k.site == EncodingSite::token) {
      auto e = token(k.name, {3, 4}, 1);
      native = e->extension_rule();
      e->set_extension_policy(ExtensionPolicy::interpolate);
      interp = e->extension_rule();
      e->set_extension_policy(ExtensionPolicy::extrapolate);
      extrap = e->extension_rule();
    } else if (k.site == EncodingSite::attention) {
      auto e = attention(k.name, {3, 4}, 1);
      native = e->extension_rule();
      e->set_extension_policy(ExtensionPolicy::interpolate);
      interp = e->extension_rule();
      e->set_extension_policy(ExtensionPolicy::extrapolate);
      extrap = e->extension_rule();
    }
    EXPECT_EQ(native, k.extension) << k.name;
    if (k.extension == ExtensionRule::none) {
      EXPECT_EQ(interp, ExtensionRule::none) << k.name;
      EXPECT_EQ(extrap, ExtensionRule::none) << k.name;
    } else {
      EXPECT_EQ(interp, ExtensionRule::interpolate) << k.name;
      EXPECT_EQ(extrap, ExtensionRule::extrapolate) << k.name;
      // The note says what the other policy does too.
      const char* other = k.extension == ExtensionRule::interpolate ? "extrapolate" : "interpolate";
      EXPECT_NE(k.extension_note.find(other), std::string::npos)
          << k.name << ": the note should say what " << other << " does: " << k.extension_note;
    }
  }
  // Options that change the native rule: a reference grid.
  EXPECT_EQ(attention("rope-axial:ref=4", {3, 4}, 0)->extension_rule(), ExtensionRule::interpolate);
  EXPECT_EQ(attention("cpb:ref=8,hidden=8", {3, 4}, 0)->extension_rule(),
            ExtensionRule::extrapolate);
}

// At the built grid nothing depends on the policy.
TEST(ExtensionPolicy, BuiltGridIsTheSameUnderEveryPolicy) {
  const Grid g{3, 4};
  for (const std::string spec : {"learned1d", "sincos1d", "separable2d", "sincos2d"}) {
    auto e = token(spec, g, 1);
    const Tensor native = e->table(g);
    for (ExtensionPolicy p : {ExtensionPolicy::interpolate, ExtensionPolicy::extrapolate,
                              ExtensionPolicy::centre, ExtensionPolicy::ntk}) {
      e->set_extension_policy(p);
      EXPECT_EQ(max_rel_error(e->table(g), native), 0.0) << spec << " " << policy_name(p);
    }
  }
  for (const std::string spec :
       {"relbias", "alibi2d", "cpb:hidden=8", "rope-axial", "rope-mixed"}) {
    auto e = attention(spec, g, 1);
    const int64_t N = 1 + g.count();
    Tensor b0 = Tensor::empty({2, N, N});
    e->bias(b0, {g, 1});
    Tensor q = random_tensor({1, 2, N, 8}, 1), k = random_tensor({1, 2, N, 8}, 2);
    Tensor q0 = Tensor::empty(q.shape()), k0 = Tensor::empty(k.shape());
    e->rotate(q0, k0, q, k, {g, 1});
    for (ExtensionPolicy p : {ExtensionPolicy::interpolate, ExtensionPolicy::extrapolate,
                              ExtensionPolicy::centre, ExtensionPolicy::ntk}) {
      e->set_extension_policy(p);
      Tensor b = Tensor::empty({2, N, N}), q1 = Tensor::empty(q.shape()),
             k1 = Tensor::empty(k.shape());
      e->bias(b, {g, 1});
      e->rotate(q1, k1, q, k, {g, 1});
      EXPECT_LT(max_rel_error(b, b0), 1e-6) << spec << " " << policy_name(p);
      EXPECT_LT(max_rel_error(q1, q0), 1e-6) << spec << " " << policy_name(p);
    }
  }
}

// Extrapolated absolute tables: patch (r, c) of a larger grid takes the built patch
// (min(r, R0-1), min(c, C0-1)); a smaller grid takes the top-left part; prefix rows are kept.
TEST(ExtensionPolicy, LearnedTablesHoldTheirEdges) {
  const Grid built{3, 4};
  for (const std::string spec : {"learned1d", "separable2d", "separable2d:mode=concat"}) {
    auto e = token(spec, built, 1);
    const Tensor t0 = e->table(built);
    e->set_extension_policy(ExtensionPolicy::extrapolate);
    for (Grid g : {Grid{5, 6}, Grid{2, 3}, Grid{4, 2}}) {
      const Tensor t = e->table(g);
      ASSERT_EQ(t.shape(), Shape({1 + g.count(), 16}));
      double worst = 0;
      for (int64_t d = 0; d < 16; ++d) {
        worst = std::max(worst, static_cast<double>(std::fabs(t.at(d) - t0.at(d))));  // prefix
        for (int64_t r = 0; r < g.rows; ++r)
          for (int64_t c = 0; c < g.cols; ++c) {
            const float want =
                at(t0, 1, built, std::min(r, built.rows - 1), std::min(c, built.cols - 1), d);
            worst = std::max(worst, static_cast<double>(std::fabs(at(t, 1, g, r, c, d) - want)));
          }
      }
      EXPECT_EQ(worst, 0.0) << spec << " at " << g.str();
    }
    // Interpolation (the native rule) gives other numbers at a larger grid.
    e->set_extension_policy(ExtensionPolicy::native);
    const Tensor ti = e->table({5, 6});
    e->set_extension_policy(ExtensionPolicy::extrapolate);
    EXPECT_GT(max_rel_error(ti, e->table({5, 6})), 1e-3) << spec;
  }
}

// Centre-anchored absolute tables: the built table sits at centre_offset() of the new grid
// unchanged (its middle part when smaller), learned tables hold their edges on every side, and
// sincos2d's coordinates run past the built grid on both sides (negative before it).
TEST(ExtensionPolicy, CentreAnchorsAbsoluteTablesInTheMiddle) {
  const Grid built{3, 4};
  for (const std::string spec : {"learned1d", "separable2d", "separable2d:mode=concat", "sincos2d",
                                 "sincos2d:layout=timm"}) {
    auto e = token(spec, built, 1);
    const Tensor t0 = e->table(built);
    e->set_extension_policy(ExtensionPolicy::centre);
    const bool learned = spec.rfind("sincos2d", 0) != 0;
    for (Grid g : {Grid{7, 8}, Grid{1, 2}, Grid{4, 3}}) {
      const int64_t oy = centre_offset(built.rows, g.rows), ox = centre_offset(built.cols, g.cols);
      const Tensor t = e->table(g);
      ASSERT_EQ(t.shape(), Shape({1 + g.count(), 16}));
      double worst = 0;
      for (int64_t r = 0; r < g.rows; ++r)
        for (int64_t c = 0; c < g.cols; ++c) {
          const bool inside =
              r - oy >= 0 && r - oy < built.rows && c - ox >= 0 && c - ox < built.cols;
          if (!inside && !learned) continue;
          const int64_t br = std::clamp<int64_t>(r - oy, 0, built.rows - 1);
          const int64_t bc = std::clamp<int64_t>(c - ox, 0, built.cols - 1);
          for (int64_t d = 0; d < 16; ++d)
            worst = std::max(worst, static_cast<double>(std::fabs(at(t, 1, g, r, c, d) -
                                                                  at(t0, 1, built, br, bc, d))));
        }
      EXPECT_LT(worst, 1e-6) << spec << " at " << g.str();
    }
  }
  // sincos2d at patch (0, 0) of a 7x8 grid: coordinates (-2, -2), the first channel sin(-2 w_0).
  auto e = token("sincos2d", built, 0);
  e->set_extension_policy(ExtensionPolicy::centre);
  const Grid g{7, 8};
  const Tensor t = e->table(g);
  EXPECT_NEAR(at(t, 0, g, 0, 0, 0), std::sin(-2.0), 1e-6);  // mae layout: sin(x w_0), w_0 = 1
  EXPECT_NEAR(at(t, 0, g, 6, 7, 8), std::sin(4.0), 1e-6);   // channel 2P: sin(y w_0), y = 6 - 2
  // Extrapolation anchors at the first patch instead: another table.
  e->set_extension_policy(ExtensionPolicy::extrapolate);
  EXPECT_GT(max_rel_error(e->table(g), t), 1e-2);
}

// ntk on a grid s times the built one per axis: frequency k of the n on an axis turns by its
// coordinate times s^(-k/(n-1)): the highest frequency as extrapolated, the lowest as
// interpolated, the middle ones between; the rotations themselves follow their terms.
TEST(ExtensionPolicy, NtkScalesEachFrequencyByItsPart) {
  const Grid built{3, 4}, used{6, 12};  // s = 2 down the rows, 3 along the columns
  const int64_t hd = 16, quarter = hd / 4, half = hd / 2;
  for (const std::string spec : {"rope-axial", "rope-mixed", "rope-axial:indexing=ij"}) {
    auto e = attention(spec, built, 0, 2, hd);
    const Tensor f0 = e->terms({built, 0}).rotation_freqs;  // [H, hd/2, 2]
    e->set_extension_policy(ExtensionPolicy::ntk);
    const Tensor fn = e->terms({used, 0}).rotation_freqs;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t p = 0; p < half; ++p) {
        const int64_t k = p % quarter;
        const double sx = std::pow(3.0, -static_cast<double>(k) / (quarter - 1));
        const double sy = std::pow(2.0, -static_cast<double>(k) / (quarter - 1));
        const int64_t i = (h * half + p) * 2;
        EXPECT_NEAR(fn.at(i), f0.at(i) * sx, 1e-6 * std::fabs(f0.at(i)) + 1e-9) << spec << p;
        EXPECT_NEAR(fn.at(i + 1), f0.at(i + 1) * sy, 1e-6 * std::fabs(f0.at(i + 1)) + 1e-9)
            << spec << p;
      }
    // The rotation applied on the CPU is the one the terms describe: pair p of head h at patch
    // (y, x) turns by x f[.., 0] + y f[.., 1].
    const int64_t N = used.count();
    Tensor q = random_tensor({1, 2, N, hd}, 41), k = random_tensor({1, 2, N, hd}, 42);
    Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
    e->rotate(qo, ko, q, k, {used, 0});
    double worst = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < half; ++p) {
          const double a = (n % used.cols) * fn.at((h * half + p) * 2) +
                           (n / used.cols) * fn.at((h * half + p) * 2 + 1);
          const float* x = q.f32() + (h * N + n) * hd + 2 * p;
          const float* y = qo.f32() + (h * N + n) * hd + 2 * p;
          worst = std::max(worst, std::fabs(y[0] - (x[0] * std::cos(a) - x[1] * std::sin(a))));
          worst = std::max(worst, std::fabs(y[1] - (x[0] * std::sin(a) + x[1] * std::cos(a))));
        }
    EXPECT_LT(worst, 1e-4) << spec;
  }
  // sincos2d: channel k of the x quarter is sin(x w_k s^(-k/(P-1))), P = D/4.
  auto e = token("sincos2d", built, 0);
  e->set_extension_policy(ExtensionPolicy::ntk);
  const Tensor t = e->table(used);
  const int64_t P = 4;
  for (int64_t k = 0; k < P; ++k) {
    const double w = std::pow(10000.0, -static_cast<double>(k) / P);
    const double x = 11, y = 5;
    EXPECT_NEAR(at(t, 0, used, 5, 11, k), std::sin(x * w * std::pow(3.0, -k / 3.0)), 1e-6) << k;
    EXPECT_NEAR(at(t, 0, used, 5, 11, 2 * P + k), std::sin(y * w * std::pow(2.0, -k / 3.0)), 1e-6)
        << k;
  }
  // Kinds without a frequency ladder keep their own rule: learned1d interpolates.
  auto l = token("learned1d", built, 1);
  const Tensor native = l->table(used);
  l->set_extension_policy(ExtensionPolicy::ntk);
  EXPECT_EQ(max_rel_error(l->table(used), native), 0.0);
}

// Interpolated fixed tables: on a grid twice as large (both axes), patch (2r, 2c) has the built
// patch (r, c)'s value, and patch (1, 1) lies between.
TEST(ExtensionPolicy, SincosInterpolationRescalesCoordinates) {
  const Grid built{3, 4}, twice{6, 8};
  for (const std::string spec : {"sincos2d", "sincos2d:layout=timm", "sincos1d"}) {
    auto e = token(spec, built, 1);
    const Tensor t0 = e->table(built);
    const Tensor tx = e->table(twice);  // extrapolate (native): integer coordinates
    e->set_extension_policy(ExtensionPolicy::interpolate);
    const Tensor t = e->table(twice);
    double worst = 0;
    for (int64_t r = 0; r < built.rows; ++r)
      for (int64_t c = 0; c < built.cols; ++c)
        for (int64_t d = 0; d < 16; ++d)
          worst = std::max(worst, static_cast<double>(std::fabs(at(t, 1, twice, 2 * r, 2 * c, d) -
                                                                at(t0, 1, built, r, c, d))));
    EXPECT_LT(worst, 1e-6) << spec;
    EXPECT_GT(max_rel_error(t, tx), 1e-2) << spec << ": the policies should differ";
  }
  // sincos2d's coordinate (0.5, 0.5): the first channel pair is sin/cos of x * 1.
  auto e = token("sincos2d", built, 0);
  e->set_extension_policy(ExtensionPolicy::interpolate);
  const Tensor t = e->table(twice);
  EXPECT_NEAR(at(t, 0, twice, 1, 1, 0), std::sin(0.5), 1e-6);  // mae layout: sin(x w_0), w_0 = 1
}

// Relative tables extrapolated: an offset past the built window's takes the largest trained one.
TEST(ExtensionPolicy, RelbiasExtrapolationClampsOffsets) {
  const Grid built{2, 3}, big{4, 5};
  auto e = attention("relbias", built, 1);
  const int64_t H = 2, N0 = 1 + built.count(), N = 1 + big.count();
  Tensor b0 = Tensor::empty({H, N0, N0});
  e->bias(b0, {built, 1});
  e->set_extension_policy(ExtensionPolicy::extrapolate);
  Tensor b = Tensor::empty({H, N, N});
  e->bias(b, {big, 1});
  // In the built window the bias of offset (dy, dx) is read off any pair with that offset.
  auto built_bias = [&](int64_t h, int64_t dy, int64_t dx) {
    for (int64_t i = 0; i < built.count(); ++i)
      for (int64_t j = 0; j < built.count(); ++j)
        if (i / built.cols - j / built.cols == dy && i % built.cols - j % built.cols == dx)
          return b0.at((h * N0 + 1 + i) * N0 + 1 + j);
    ADD_FAILURE() << "offset " << dy << "," << dx;
    return 0.f;
  };
  double worst = 0;
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < big.count(); ++i)
      for (int64_t j = 0; j < big.count(); ++j) {
        const int64_t dy = std::clamp<int64_t>(i / big.cols - j / big.cols, -1, 1);
        const int64_t dx = std::clamp<int64_t>(i % big.cols - j % big.cols, -2, 2);
        worst = std::max(worst, static_cast<double>(std::fabs(b.at((h * N + 1 + i) * N + 1 + j) -
                                                              built_bias(h, dy, dx))));
      }
    // The class-token entries stay.
    EXPECT_EQ(b.at((h * N + 0) * N + 3), b0.at((h * N0 + 0) * N0 + 3));
    EXPECT_EQ(b.at((h * N + 3) * N + 0), b0.at((h * N0 + 3) * N0 + 0));
  }
  EXPECT_EQ(worst, 0.0);
}

// Rotations and distances interpolated on a window twice as large: frequencies (which the kernel
// multiplies by integer coordinates) halve; ALiBi's distance between (0, 0) and (2, 2) is the
// built one between (0, 0) and (1, 1).
TEST(ExtensionPolicy, RopeAndAlibiInterpolationScaleCoordinates) {
  const Grid built{3, 4}, twice{6, 8};
  for (const std::string spec : {"rope-axial", "rope-mixed", "rope-axial:ref=6x8"}) {
    auto e = attention(spec, built, 1);
    const Tensor f0 = e->terms({built, 1}).rotation_freqs;
    e->set_extension_policy(ExtensionPolicy::interpolate);
    Tensor fi = e->terms({twice, 1}).rotation_freqs;
    for (int64_t i = 0; i < fi.numel(); ++i) EXPECT_FLOAT_EQ(fi.at(i), 0.5f * f0.at(i)) << spec;
    e->set_extension_policy(ExtensionPolicy::extrapolate);
    Tensor fx = e->terms({twice, 1}).rotation_freqs;
    EXPECT_EQ(max_rel_error(fx, f0), 0.0) << spec;
  }
  // The rotation itself agrees with the terms: q at (2, 2) of the large window turns as q at
  // (1, 1) of the built one.
  auto e = attention("rope-mixed", built, 0);
  e->set_extension_policy(ExtensionPolicy::interpolate);
  Tensor q = Tensor::full({1, 2, twice.count(), 8}, 1.f), k = q.clone();
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(q.shape());
  e->rotate(qo, ko, q, k, {twice, 0});
  Tensor q0 = Tensor::full({1, 2, built.count(), 8}, 1.f), k0 = q0.clone();
  Tensor q0o = Tensor::empty(q0.shape()), k0o = Tensor::empty(q0.shape());
  e->rotate(q0o, k0o, q0, k0, {built, 0});
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t c = 0; c < 8; ++c)
      EXPECT_NEAR(qo.at((h * twice.count() + 2 * twice.cols + 2) * 8 + c),
                  q0o.at((h * built.count() + 1 * built.cols + 1) * 8 + c), 1e-5);

  auto a = attention("alibi2d", built, 0);
  const int64_t N0 = built.count(), N = twice.count();
  Tensor b0 = Tensor::empty({2, N0, N0}), bx = Tensor::empty({2, N, N}), bi = bx.clone();
  a->bias(b0, {built, 0});
  a->bias(bx, {twice, 0});
  a->set_extension_policy(ExtensionPolicy::interpolate);
  a->bias(bi, {twice, 0});
  const int64_t i11 = 1 * built.cols + 1, i22 = 2 * twice.cols + 2;
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_FLOAT_EQ(bi.at((h * N) * N + i22), b0.at((h * N0) * N0 + i11));
    EXPECT_FLOAT_EQ(bx.at((h * N) * N + i22), 2.f * b0.at((h * N0) * N0 + i11));
  }
}

// cpb: interpolation maps the large window's offsets into the built range (offset 2d of a 7-wide
// window is offset d of the 4-wide one), extrapolation keeps the built scale (offsets within the
// built range keep their values).
TEST(ExtensionPolicy, CpbPoliciesScaleOffsets) {
  const Grid built{4, 4}, big{7, 7};
  auto e = attention("cpb:hidden=16", built, 0);
  const Tensor t0 = e->terms({built, 0}).relative_table;  // [(2*4-1)^2, H]
  auto row = [](Grid w, int64_t dy, int64_t dx) {
    return (dy + w.rows - 1) * (2 * w.cols - 1) + (dx + w.cols - 1);
  };
  e->set_extension_policy(ExtensionPolicy::interpolate);
  const Tensor ti = e->terms({big, 0}).relative_table;
  e->set_extension_policy(ExtensionPolicy::extrapolate);
  const Tensor tx = e->terms({big, 0}).relative_table;
  for (int64_t dy = -3; dy <= 3; ++dy)
    for (int64_t dx = -3; dx <= 3; ++dx)
      for (int64_t h = 0; h < 2; ++h) {
        EXPECT_NEAR(ti.at(row(big, 2 * dy, 2 * dx) * 2 + h), t0.at(row(built, dy, dx) * 2 + h),
                    1e-5);
        EXPECT_NEAR(tx.at(row(big, dy, dx) * 2 + h), t0.at(row(built, dy, dx) * 2 + h), 1e-5);
      }
}

// Backward through every new path (held edges, clamped offsets, scaled coordinates) against
// finite differences, at a larger and a smaller grid.
TEST(ExtensionPolicy, BackwardMatchesFiniteDifferences) {
  for (const std::string spec : {"learned1d", "separable2d"})
    for (ExtensionPolicy policy : {ExtensionPolicy::extrapolate, ExtensionPolicy::centre})
      for (Grid used : {Grid{4, 6}, Grid{2, 3}, Grid{7, 2}}) {
        auto e = token(spec, {3, 4}, 1);
        e->set_extension_policy(policy);
        const int64_t n = 1 + used.count();
        Tensor w = random_tensor({2, n, 16}, 7);
        for (Param* p : e->params()) p->grad.zero();
        e->backward(w, used);
        auto loss = [&] {
          Tensor x = Tensor::zeros({2, n, 16});
          e->forward(x, used);
          return weighted_sum(x, w);
        };
        for (Param* p : e->params())
          EXPECT_LT(max_rel_error(p->grad, numeric_grad(p->value, loss)), 1e-3)
              << spec << " " << policy_name(policy) << " " << p->name << " at " << used.str();
      }
  for (Grid used : {Grid{4, 5}, Grid{1, 2}}) {
    const int64_t H = 2, N = 1 + used.count();
    auto e = attention("relbias", {2, 3}, 1);
    e->set_extension_policy(ExtensionPolicy::extrapolate);
    Tensor w = random_tensor({H, N, N}, 6);
    Param* p = e->params()[0];
    p->grad.zero();
    e->bias_backward(w, {used, 1});
    auto loss = [&] {
      Tensor b = Tensor::empty({H, N, N});
      e->bias(b, {used, 1});
      return weighted_sum(b, w);
    };
    EXPECT_LT(max_rel_error(p->grad, numeric_grad(p->value, loss)), 1e-3) << used.str();
  }
  for (ExtensionPolicy policy : {ExtensionPolicy::interpolate, ExtensionPolicy::ntk}) {
    // rope-mixed's frequency gradient with the scaled coordinates.
    const Grid used{6, 8};
    const int64_t N = used.count();
    auto e = attention("rope-mixed", {3, 4}, 0);
    e->set_extension_policy(policy);
    Tensor q = random_tensor({1, 2, N, 8}, 31), k = random_tensor({1, 2, N, 8}, 32);
    Tensor wq = random_tensor(q.shape(), 33), wk = random_tensor(k.shape(), 34);
    Tensor dq = Tensor::zeros(q.shape()), dk = Tensor::zeros(k.shape());
    Param* p = e->params()[0];
    p->grad.zero();
    e->rotate_backward(dq, dk, wq, wk, q, k, {used, 0});
    auto loss = [&] {
      Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
      e->rotate(qo, ko, q, k, {used, 0});
      return weighted_sum(qo, wq) + weighted_sum(ko, wk);
    };
    EXPECT_LT(max_rel_error(p->grad, numeric_grad(p->value, loss, 1e-3)), 2e-3)
        << policy_name(policy);
  }
}

// The model-level switch: every part follows it, the logits at the configured size do not
// change, those at another size do, and the rules in effect are reported per kind.
TEST(ExtensionPolicy, ModelSwitchesEveryPart) {
  ModelConfig c = testing::tiny_vit_config("learned1d+relbias", 12, 2, 2, 3);
  auto m = make_model(c, 5);
  EXPECT_EQ(m->extension_rules(), "learned1d interpolate, relbias interpolate");
  const int64_t S = c.img_rows, L = c.img_rows + 2 * c.patch;
  const Tensor small = random_tensor({2, c.channels, S, S}, 8);
  const Tensor large = random_tensor({2, c.channels, L, L}, 9);
  const Tensor s0 = m->forward(small).clone(), l0 = m->forward(large).clone();
  m->set_extension_policy(ExtensionPolicy::extrapolate);
  EXPECT_EQ(m->extension_policy(), ExtensionPolicy::extrapolate);
  EXPECT_EQ(m->extension_rules(), "learned1d extrapolate, relbias extrapolate");
  for (AttentionEncoding* a : m->encoding_parts().attention)
    EXPECT_EQ(a->extension_rule(), ExtensionRule::extrapolate);
  EXPECT_EQ(max_rel_error(m->forward(small), s0), 0.0);
  EXPECT_GT(max_rel_error(m->forward(large), l0), 1e-4);
  m->set_extension_policy(ExtensionPolicy::native);  // back: the cached tables follow
  EXPECT_EQ(max_rel_error(m->forward(large), l0), 0.0);

  c.encoding = "none";
  EXPECT_EQ(make_model(c, 5)->extension_rules(), "none");
}

}  // namespace
}  // namespace vitpe
