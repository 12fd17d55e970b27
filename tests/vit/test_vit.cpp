// ViT: every encoding kind runs forward; backward of the whole model against finite
// differences; resolution change; repeated forwards allocate nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing.h"
#include "tests/vit/model_gradients.h"
#include "vit/model.h"
#include "vit/vit.h"

namespace vitpe {
namespace {

using testing::random_tensor;

ModelConfig tiny_vit(const std::string& encoding) {
  ModelConfig c;
  c.kind = ModelKind::vit;
  c.name = "tiny";
  c.img_rows = 12;
  c.img_cols = 8;  // non-square: a 3 x 2 grid of 4x4 patches
  c.channels = 2;
  c.patch = 4;
  c.dim = 16;
  c.depth = 2;
  c.heads = 2;
  c.mlp_dim = 24;
  c.classes = 3;
  c.encoding = encoding;
  c.mean = {0.5f, 0.5f};
  c.std = {0.5f, 0.5f};
  return c;
}

const char* kKinds[] = {"none",      "learned1d", "sincos1d",   "separable2d",
                        "sincos2d",  "relbias",   "rope-axial", "rope-mixed",
                        "alibi2d",   "learned1d+relbias", "rope-mixed+learned1d"};

class VitEveryEncoding : public ::testing::TestWithParam<const char*> {};

TEST_P(VitEveryEncoding, ForwardShapeAndFinite) {
  for (Pool pool : {Pool::cls, Pool::avg}) {
    ModelConfig c = tiny_vit(GetParam());
    c.pool = pool;
    auto model = make_model(c, 1);
    Tensor x = random_tensor({3, 2, 12, 8}, 2);
    const Tensor& y = model->forward(x);
    ASSERT_EQ(y.shape(), Shape({3, 3}));
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(std::isfinite(y.at(i)));
    // A second size (a 4 x 3 grid) uses the resampled encoding.
    Tensor x2 = random_tensor({1, 2, 16, 12}, 3);
    const Tensor& y2 = model->forward(x2);
    ASSERT_EQ(y2.shape(), Shape({1, 3}));
    for (int64_t i = 0; i < y2.numel(); ++i) EXPECT_TRUE(std::isfinite(y2.at(i)));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, VitEveryEncoding, ::testing::ValuesIn(kKinds));

// Batch entries are independent: the logits of one image do not depend on the others.
TEST(Vit, BatchEntriesIndependent) {
  auto model = make_model(tiny_vit("learned1d+relbias"), 4);
  Tensor x = random_tensor({3, 2, 12, 8}, 5);
  Tensor all = model->forward(x).clone();
  Tensor one = model->forward(x.slice(1, 2)).clone();
  for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(one.at(j), all.at(3 + j), 1e-5);
}

// d(sum(w * logits)) / d(param) by the model's backward vs central differences.
void check_model_gradients(const std::string& encoding, Pool pool) {
  ModelConfig c = tiny_vit(encoding);
  c.pool = pool;
  c.depth = 1;
  auto model = make_model(c, 7);
  testing::check_model_gradients(*model, random_tensor({2, 2, 12, 8}, 8), 12, encoding);
}

TEST(VitGradients, LearnedClassToken) { check_model_gradients("learned1d", Pool::cls); }
TEST(VitGradients, RelbiasMeanPool) { check_model_gradients("relbias", Pool::avg); }
TEST(VitGradients, RopeMixed) { check_model_gradients("rope-mixed+learned1d", Pool::cls); }
TEST(VitGradients, Separable2d) { check_model_gradients("separable2d", Pool::avg); }
TEST(VitGradients, NoEncodingMeanPool) { check_model_gradients("none", Pool::avg); }
TEST(VitGradients, Alibi) { check_model_gradients("alibi2d", Pool::cls); }

TEST(Vit, SizeNotMultipleOfPatchIsAnError) {
  auto model = make_model(tiny_vit("sincos2d"), 1);
  Tensor x = random_tensor({1, 2, 13, 8}, 1);
  try {
    model->forward(x);
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("13x8 is not a multiple of the patch size 4"),
              std::string::npos)
        << e.what();
  }
  Tensor wrong_channels = random_tensor({1, 3, 12, 8}, 1);
  EXPECT_THROW(model->forward(wrong_channels), ShapeError);
}

TEST(Vit, RepeatedForwardAllocatesNothing) {
  auto model = make_model(tiny_vit("learned1d+relbias"), 1);
  Tensor x = random_tensor({2, 2, 12, 8}, 1);
  model->forward(x);
  model->forward(x);
  const int64_t before = storage_allocation_count();
  model->forward(x);
  EXPECT_EQ(storage_allocation_count(), before);
}

TEST(Vit, PresetsValidateAndCountParameters) {
  // timm's vit_small_patch16_224 has 22,050,664 parameters.
  auto model = make_model(preset("vit-small-patch16-224"), 0);
  EXPECT_EQ(model->num_params(), 22050664);
  EXPECT_THROW(preset("vit-huge-unknown"), std::invalid_argument);
  ModelConfig bad = tiny_vit("sincos2d");
  bad.heads = 3;
  EXPECT_THROW(make_model(bad), std::invalid_argument);
}

TEST(Vit, ConfigJsonRoundTrip) {
  ModelConfig c = preset("vit-fmnist");
  c.encoding = "rope-mixed+learned1d";
  ModelConfig d = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_THROW(ModelConfig::from_json("{\"kind\": \"vit\"}"), std::invalid_argument);
  EXPECT_THROW(ModelConfig::from_json("not json"), std::invalid_argument);
}

}  // namespace
}  // namespace vitpe
