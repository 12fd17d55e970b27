// Swin: every encoding kind through forward (the window layout is tested in test_windows.cpp),
// backward against finite differences, parameter count of Swin-T.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/testing.h"
#include "tests/vit/models/every_encoding.h"
#include "tests/vit/models/model_gradients.h"
#include "vit/models/swin/swin.h"

namespace vitpe {
namespace {

using testing::max_rel_error;
using testing::random_tensor;

ModelConfig tiny_swin(const std::string& encoding) {
  ModelConfig c = preset("swin-fmnist");
  c.name = "tiny-swin";
  c.img_rows = 16;
  c.img_cols = 24;  // 8 x 12 patches of 2: two windows of 4 across the rows, three across cols
  c.swin().window = 4;
  c.swin().dim = 8;
  c.swin().depths = {2, 1};
  c.swin().stage_heads = {2, 2};
  c.swin().mlp_ratio = 2.0f;
  c.classes = 3;
  c.encoding = encoding;
  c.labels.clear();
  return c;
}

class SwinEveryEncoding : public ::testing::TestWithParam<std::string> {};

TEST_P(SwinEveryEncoding, ForwardShapeAndFinite) {
  auto model = make_model(tiny_swin(GetParam()), 1);
  EXPECT_EQ(model->num_encoding_params(), testing::params_added_by_encoding(tiny_swin(GetParam())))
      << GetParam();
  Tensor x = random_tensor({3, 1, 16, 24}, 2);
  const Tensor& y = model->forward(x);
  ASSERT_EQ(y.shape(), Shape({3, 3}));
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.at(i)));
}

// Swin V2's blocks (post-norm, cosine attention) with every kind in place of cpb.
TEST_P(SwinEveryEncoding, V2ForwardShapeAndFinite) {
  ModelConfig c = tiny_swin(GetParam());
  c.swin().v2 = true;
  auto model = make_model(c, 1);
  EXPECT_EQ(model->num_encoding_params(), testing::params_added_by_encoding(c)) << GetParam();
  const Tensor& y = model->forward(random_tensor({3, 1, 16, 24}, 2));
  ASSERT_EQ(y.shape(), Shape({3, 3}));
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.at(i))) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, SwinEveryEncoding,
    ::testing::ValuesIn(testing::every_encoding_spec(AttentionLayout::windowed)));

// CPVT's PEG (a conditional encoding) is for ViTs: Swin refuses it at construction, naming the
// model family and what it takes instead.
// At one seed every weight but the encoding's is the same whatever the encoding.
TEST(Swin, WeightsAtASeedDoNotDependOnTheEncoding) {
  auto base = make_model(tiny_swin("none"), 5);
  for (const std::string& spec : testing::every_encoding_spec(AttentionLayout::windowed)) {
    auto other = make_model(tiny_swin(spec), 5);
    EXPECT_EQ(testing::first_weight_not_shared(*base, *other), "") << spec;
  }
}

TEST(Swin, RefusesConditionalEncodings) {
  for (const std::string spec : {"peg", "peg:after=0+relbias"}) {
    const std::string m = testing::message_of([&] { make_model(tiny_swin(spec), 1); });
    EXPECT_NE(m.find("'peg' is a conditional encoding, which only ViT models take"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("Swin models take token and attention kinds"), std::string::npos) << m;
    EXPECT_NE(m.find("relbias"), std::string::npos) << m;
  }
}

void check_swin_gradients(const std::string& encoding, double h = 1e-2) {
  ModelConfig c = tiny_swin(encoding);
  c.swin().depths = {2, 1};
  auto model = make_model(c, 3);
  testing::check_model_gradients(*model, random_tensor({1, 1, 16, 24}, 4), 6, encoding, h);
}

TEST(SwinGradients, Relbias) { check_swin_gradients("relbias"); }
TEST(SwinGradients, LearnedAndRope) { check_swin_gradients("rope-mixed+learned1d"); }
// cpb with a 3e-3 step: at 1e-2 the loss's curvature through its MLP put the central difference
// of a bias whose gradient is 1e-3 at 1.1x the tolerance (with these weights at seed 3).
TEST(SwinGradients, Cpb) { check_swin_gradients("cpb:hidden=16,ref=8x8", 3e-3); }

// Swin V2: post-norm blocks, cosine attention (the logit_scale gradient, also through a rotation)
// and merging normalised after the reduction. The step is 2e-3: LayerNorms after the branches
// curve the loss enough that 1e-2 measures up to 13 % off on the patch embedding. (cpb's own
// gradient is checked with V1 blocks above.)
void check_swinv2_gradients(const std::string& encoding) {
  ModelConfig c = tiny_swin(encoding);
  c.swin().v2 = true;
  auto model = make_model(c, 5);
  testing::check_model_gradients(*model, random_tensor({1, 1, 16, 24}, 6), 6, "swin v2 " + encoding,
                                 2e-3);
}

TEST(SwinGradients, V2Relbias) { check_swinv2_gradients("relbias"); }
TEST(SwinGradients, V2RopeAxial) { check_swinv2_gradients("rope-axial"); }

TEST(Swin, OddSizesArePadded) {
  auto model = make_model(tiny_swin("relbias"), 1);
  Tensor x = random_tensor({1, 1, 18, 22}, 2);  // 9 x 11 patches: padded windows, odd merge
  const Tensor& y = model->forward(x);
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.at(i)));
}

TEST(Swin, Bf16EmulatedCoversEveryLinear) {
  // Patch merging and the head are linears too: all of them switch, and back again.
  auto model = make_model(tiny_swin("relbias"), 1);
  Tensor x = random_tensor({2, 1, 16, 24}, 2);
  const Tensor f32 = model->forward(x).clone();
  model->set_precision(Precision::bf16_emulated);
  const Tensor low = model->forward(x).clone();
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < f32.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(f32.at(i) - low.at(i))));
    ref = std::max(ref, static_cast<double>(std::abs(f32.at(i))));
  }
  EXPECT_GT(diff / ref, 1e-6);
  EXPECT_LT(diff / ref, 3e-2);
  model->set_precision(Precision::f32);
  const Tensor& again = model->forward(x);
  for (int64_t i = 0; i < f32.numel(); ++i) ASSERT_EQ(again.at(i), f32.at(i));
}

TEST(Swin, Int8CoversEveryLinearAndIsClose) {
  // Patch merging and the head are int8 too; the logits stay within the stated tolerance.
  auto model = make_model(tiny_swin("relbias"), 1);
  Tensor x = random_tensor({2, 1, 16, 24}, 2);
  const Tensor f32 = model->forward(x).clone();
  model->set_precision(Precision::int8);
  const double err = max_rel_error(model->forward(x), f32);
  RecordProperty("max_rel_logit_error", std::to_string(err));
  EXPECT_GT(err, 1e-5);
  EXPECT_LT(err, 5e-2);  // as for the tiny ViT (tests/vit/models/test_vit.cpp)
  EXPECT_THROW(model->forward(x, true), std::logic_error);
  model->set_precision(Precision::f32);
  const Tensor& again = model->forward(x);
  for (int64_t i = 0; i < f32.numel(); ++i) ASSERT_EQ(again.at(i), f32.at(i));
}

// Inference keeps each block's dense bias between calls; it must follow the encoding's
// parameters when they change (an optimiser step, a load) as a training forward does.
TEST(Swin, InferenceBiasFollowsTheEncodingsParameters) {
  for (const std::string kind : {"relbias", "cpb:hidden=16,ref=8x8"}) {
    auto model = make_model(tiny_swin(kind), 1);
    Tensor x = random_tensor({2, 1, 16, 24}, 2);
    const Tensor before = model->forward(x).clone();
    const std::vector<Param*> params = model->encoding_params();
    ASSERT_FALSE(params.empty()) << kind;
    for (Param* p : params) {
      for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] += 2.0f * ((i % 3) - 1.0f);
    }
    const Tensor after = model->forward(x).clone();
    const Tensor trained = model->forward(x, true).clone();
    EXPECT_GT(max_rel_error(after, before), 1e-4) << kind;
    EXPECT_LT(max_rel_error(after, trained), 1e-5) << kind;
    // And the same parameters again give the same logits, bit for bit.
    const Tensor& again = model->forward(x);
    for (int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(again.at(i), after.at(i)) << kind;
  }
}

TEST(Swin, TinyPresetParameterCount) {
  // timm's swin_tiny_patch4_window7_224: 28,288,354 parameters.
  auto model = make_model(preset("swin-tiny-patch4-window7-224"), 0);
  EXPECT_EQ(model->num_params(), 28288354);
}

}  // namespace
}  // namespace vitpe
