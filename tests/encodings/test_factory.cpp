// The factory: parsing, canonical strings, combinations (one part per site), option validation,
// and error messages that list what is accepted.
#include <algorithm>

#include "encodings/encoding.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

TEST(Factory, ParsesKindsOptionsAndCombinations) {
  EncodingSpec s = parse_encoding(" sincos2d:T=100,layout=timm ");
  ASSERT_EQ(s.parts.size(), 1u);
  EXPECT_EQ(s.parts[0].kind, "sincos2d");
  EXPECT_EQ(s.str(), "sincos2d:T=100,layout=timm");
  EncodingSpec c = parse_encoding("rope-mixed:theta=10+learned1d");
  EXPECT_EQ(c.str(), "rope-mixed:theta=10+learned1d");
  Rng rng(0);
  auto t = make_token_encoding(c, 16, {3, 4}, 1, rng);
  auto a = make_attention_encoding(c, 2, 8, {3, 4}, 1, rng);
  ASSERT_NE(t, nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(t->kind(), "learned1d");
  EXPECT_EQ(a->kind(), "rope-mixed");
  auto r = make_attention_encoding(parse_encoding("learned1d+relbias"), 2, 8, {3, 4}, 1, rng);
  EXPECT_EQ(r->kind(), "relbias");
  EXPECT_EQ(make_attention_encoding(parse_encoding("sincos2d"), 2, 8, {3, 4}, 1, rng), nullptr);
  EXPECT_EQ(make_token_encoding(parse_encoding("alibi2d"), 16, {3, 4}, 1, rng), nullptr);
}

TEST(Factory, UnknownKindListsKnownOnes) {
  std::string m = error_of([] { parse_encoding("sincos3d"); });
  EXPECT_NE(m.find("sincos3d"), std::string::npos) << m;
  for (const auto& k : encoding_kinds()) EXPECT_NE(m.find(k.name), std::string::npos) << m;
  // A hand-built spec is validated by the makers too.
  EncodingSpec s;
  s.parts.push_back({"bogus", {}});
  Rng rng(0);
  EXPECT_THROW(make_token_encoding(s, 8, {2, 2}, 0, rng), std::invalid_argument);
}

TEST(Factory, BadOptionsNameWhatIsAccepted) {
  std::string m = error_of([] { parse_encoding("sincos2d:temp=3"); });
  EXPECT_NE(m.find("temp"), std::string::npos) << m;
  EXPECT_NE(m.find("layout=mae|timm"), std::string::npos) << m;
  m = error_of([] { parse_encoding("sincos2d:layout=big"); });
  EXPECT_NE(m.find("big"), std::string::npos) << m;
  m = error_of([] { parse_encoding("rope-axial:theta=-1"); });
  EXPECT_NE(m.find("positive number"), std::string::npos) << m;
  EXPECT_THROW(parse_encoding("rope-axial:theta=abc"), std::invalid_argument);
  EXPECT_THROW(parse_encoding("rope-axial:theta"), std::invalid_argument);
  EXPECT_THROW(parse_encoding("sincos1d:T=5,T=6"), std::invalid_argument);
  m = error_of([] { parse_encoding("learned1d:x=1"); });
  EXPECT_NE(m.find("takes no options"), std::string::npos) << m;
}

TEST(Factory, OnePartPerSite) {
  std::string m = error_of([] { parse_encoding("sincos2d+learned1d"); });
  EXPECT_NE(m.find("at most one part per site"), std::string::npos) << m;
  EXPECT_THROW(parse_encoding("relbias+rope-axial"), std::invalid_argument);
  EXPECT_THROW(parse_encoding("learned1d++relbias"), std::invalid_argument);
  EXPECT_THROW(parse_encoding(""), std::invalid_argument);
}

TEST(Factory, KindsListedWithSitesAndDefaults) {
  auto kinds = encoding_kinds();
  ASSERT_EQ(kinds.size(), 12u);
  std::map<std::string, EncodingKindInfo> by;
  for (auto& k : kinds) by[k.name] = k;
  EXPECT_EQ(by["learned1d"].site, EncodingSite::token);
  EXPECT_EQ(by["relbias"].site, EncodingSite::attention);
  EXPECT_EQ(by["none"].site, EncodingSite::none);
  EXPECT_EQ(by["rope-axial"].options,
            "theta=100, indexing=xy (xy|ij), ref=none, shift=none, jitter=none, rescale=none");
  EXPECT_EQ(by["rope-mixed"].options, "theta=10, shift=none, jitter=none, rescale=none");
  EXPECT_EQ(by["rope-dinov3"].site, EncodingSite::attention);
  EXPECT_EQ(by["rope-dinov3"].options,
            "theta=100, normalize=separate (separate|max|min), indexing=ij (ij|xy), shift=none, "
            "jitter=none, rescale=none");
  EXPECT_EQ(by["cpb"].site, EncodingSite::attention);
  EXPECT_EQ(by["cpb"].options, "hidden=512, ref=none");
  EXPECT_EQ(by["sincos2d"].options, "T=10000, layout=mae (mae|timm)");
  EXPECT_EQ(by["peg"].site, EncodingSite::conditional);
  EXPECT_EQ(by["peg"].options, "after=1");
  for (auto& k : kinds) EXPECT_FALSE(k.summary.empty()) << k.name;
}

// The registry is the one list of kinds: the one-part-per-site error, the default studies and
// the extension rules all come from it, so a new kind needs only its file and its entry.
TEST(Factory, RegistryDrivesErrorsDefaultsAndExtensionRules) {
  const std::string m = error_of([] { parse_encoding("sincos2d+learned1d"); });
  std::vector<std::string> global, windowed;
  for (const auto& k : encoding_kinds()) {
    if (k.site != EncodingSite::none) {
      EXPECT_NE(m.find(k.name), std::string::npos) << k.name << ": " << m;
    }
    if (k.studied_global) global.push_back(k.name);
    if (k.studied_windowed) windowed.push_back(k.name);
    if (k.name == "none") {
      EXPECT_EQ(k.extension, ExtensionRule::none);
    } else if (k.site == EncodingSite::conditional) {
      // Computed from the tokens at any grid: no rule, but a note saying so.
      EXPECT_EQ(k.extension, ExtensionRule::none) << k.name;
      EXPECT_FALSE(k.extension_note.empty()) << k.name;
    } else {
      EXPECT_NE(k.extension, ExtensionRule::none) << k.name;
      EXPECT_FALSE(k.extension_note.empty()) << k.name;
    }
  }
  EXPECT_EQ(default_study_encodings(AttentionLayout::global), global);
  EXPECT_EQ(default_study_encodings(AttentionLayout::windowed), windowed);
  // Every kind but cpb and rope-dinov3 (kept out so that the default studies stay as they were).
  EXPECT_EQ(global.size(), encoding_kinds().size() - 2);
  for (const char* kept_out : {"cpb", "rope-dinov3"}) {
    EXPECT_EQ(std::count(global.begin(), global.end(), kept_out), 0) << kept_out;
    EXPECT_EQ(std::count(windowed.begin(), windowed.end(), kept_out), 0) << kept_out;
  }
  // The 1D kinds (a flattened index) are left out of windowed-model studies.
  EXPECT_EQ(std::count(windowed.begin(), windowed.end(), "learned1d"), 0);
  EXPECT_EQ(std::count(windowed.begin(), windowed.end(), "sincos1d"), 0);
  // The conditional kind is studied in ViTs only: Swin has no conditional site.
  EXPECT_EQ(std::count(global.begin(), global.end(), "peg"), 1);
  EXPECT_EQ(std::count(windowed.begin(), windowed.end(), "peg"), 0);
  EXPECT_EQ(std::string(rule_name(ExtensionRule::interpolate)), "interpolate");
  EXPECT_EQ(std::string(rule_name(ExtensionRule::extrapolate)), "extrapolate");
}

}  // namespace
}  // namespace vitpe

namespace vitpe {
namespace {

// After a first call has filled the caches, forward, bias and rotate allocate nothing (the
// models' steady state allocates nothing), at the built grid and at another one.
TEST(Factory, SteadyStateForwardAllocatesNothing) {
  for (const auto& k : encoding_kinds()) {
    if (k.name == "none") continue;
    Rng rng(0);
    EncodingSpec s = parse_encoding(k.name);
    Grid g{3, 4};
    auto t = make_token_encoding(s, 16, g, 1, rng);
    auto a = make_attention_encoding(s, 2, 8, g, 1, rng);
    auto c = make_conditional_encoding(s, 16, g, 1, rng);
    for (Grid use : {g, Grid{5, 2}}) {
      AttnGeometry geom{use, 1};
      Tensor x = Tensor::zeros({2, 1 + use.count(), 16});
      Tensor b = Tensor::empty({2, geom.tokens(), geom.tokens()});
      Tensor q = Tensor::full({2, 2, geom.tokens(), 8}, 1.f), qo = q.clone(), ko = q.clone();
      auto step = [&] {
        if (t) t->forward(x, use);
        if (a && a->has_bias()) a->bias(b, geom);
        if (a && a->has_rotation()) a->rotate(qo, ko, q, q, geom);
        if (c) c->forward(x, use);
      };
      step();
      int64_t before = storage_allocation_count();
      step();
      EXPECT_EQ(storage_allocation_count(), before) << k.name << " at " << use.str();
    }
  }
}

}  // namespace
}  // namespace vitpe
