// The whole-model GPU path (vit/models/cuda_model.h) against the CPU model it was built from:
// logits of small random-weight ViTs and Swins with every encoding spec of the registry's list
// (tests/vit/models/every_encoding.h), ViT variants (registers, mean pooling, layer scale, no
// class row, distillation token), other input sizes, device-resident input, the steady state and
// the Classifier's device choice.
// Tolerances, as max |gpu - cpu| / max |cpu| over the logits:
//   f32   1e-4: the same f32 arithmetic in another order (GEMM tiling, warp reductions, online
//         softmax) through every block. This is the check of the indexing: with the ops emulated
//         on the host by their contracts (cuda_ops.h) the error is below 1.3e-6 for every case,
//         and a dropped Swin shift mask alone moves the logits by 5e-2;
//   bf16  8e-2: weights, activations and logits rounded to bf16 (8 bits of mantissa) at every
//         op, f32 accumulation; the same emulation with bf16 storage gives up to 2.9e-2 (ViT with
//         head dim 128 at batch 1), the tensor-core attention rounds its probabilities too.
// The refusal tests need no device: the unsupported features are refused before it is touched.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/cuda/cuda_testing.h"
#include "tests/testing.h"
#include "tests/vit/models/every_encoding.h"
#include "vit/io/classifier.h"
#include "vit/models/cuda_model.h"

namespace vitpe {
namespace {

using namespace cudatest;

constexpr double kModelTolF32 = 1e-4;
constexpr double kModelTolBf16 = 8e-2;
double model_tol(DType t) { return t == DType::f32 ? kModelTolF32 : kModelTolBf16; }

ModelConfig small_vit(const std::string& encoding) {
  ModelConfig c;
  c.name = "small-test-vit";
  c.img_rows = 32;
  c.img_cols = 24;  // a non-square 4 x 3 grid of 8x8 patches
  c.channels = 3;
  c.patch = 8;
  c.vit().dim = 128;
  c.vit().depth = 2;
  c.vit().heads = 2;  // head dim 64
  c.vit().mlp_dim = 256;
  c.classes = 10;
  c.encoding = encoding;
  return c;
}

ModelConfig small_swin(const std::string& encoding) {
  ModelConfig c = preset("swin-fmnist");  // Swin's settings (mean pooling, no class token, eps)
  c.name = "small-test-swin";
  c.img_rows = 64;
  c.img_cols = 32;  // 16 x 8 patches of 4: shifted windows along both axes, then one
  c.channels = 3;
  c.patch = 4;
  c.swin().dim = 32;
  c.swin().depths = {2, 2, 2};  // stage grids 16x8, 8x4, 4x2: the last clamps the window, no shift
  c.swin().stage_heads = {1, 2, 4};  // head dim 32 in every stage
  c.swin().window = 4;
  c.swin().mlp_ratio = 2.0f;
  c.classes = 10;
  c.encoding = encoding;
  c.labels.clear();
  c.preprocess.mean = kImageNetMean;
  c.preprocess.std_dev = kImageNetStd;
  return c;
}

// Every parameter moved off its initialisation (LayerNorm gains near 1, everything else with a
// spread that makes each term visible in the logits: encoding tables, tokens, biases).
std::unique_ptr<Model> random_model(const ModelConfig& c, uint64_t seed) {
  std::unique_ptr<Model> m = make_model(c, seed);
  uint64_t s = seed * 1000;
  for (Param* p : m->params()) {
    Tensor noise = testing::random_tensor(p->value.shape(), ++s, 0.1);
    const bool gain = p->name.size() > 7 && (p->name.rfind(".weight") == p->name.size() - 7) &&
                      p->value.ndim() == 1;  // LayerNorm weights
    for (int64_t i = 0; i < p->value.numel(); ++i)
      p->value.at(i) = (gain ? 1.0f : p->value.at(i)) + noise.at(i);
  }
  for (Param* p : m->encoding_params()) {
    Tensor noise = testing::random_tensor(p->value.shape(), ++s, 0.5);
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.at(i) += noise.at(i);
  }
  return m;
}

// Whether a spec has a part of a site the GPU path refuses (conditional: PEG), read from the
// registry.
std::string conditional_kind(const std::string& spec) {
  for (const EncodingSpec::Part& part : parse_encoding(spec).parts)
    for (const EncodingKindInfo& k : encoding_kinds())
      if (k.name == part.kind && k.site == EncodingSite::conditional) return k.name;
  return "";
}

// CPU logits and GPU logits of the same images in dtype t: the relative error.
double gpu_error(Model& cpu, const Tensor& images, DType t) {
  const Tensor want = cpu.forward(images).clone();
  CudaModel gpu(cpu, t);
  const Tensor got = gpu.forward(images).clone();
  EXPECT_EQ(got.shape(), want.shape());
  return rel_error(got, want);
}

void expect_matches(const ModelConfig& c, const std::vector<Shape>& inputs,
                    const std::string& what) {
  auto cpu = random_model(c, 7);
  uint64_t seed = 11;
  for (const Shape& s : inputs) {
    const Tensor images = testing::random_tensor(s, ++seed);
    for (DType t : {DType::f32, DType::bf16}) {
      EXPECT_LT(gpu_error(*cpu, images, t), model_tol(t))
          << what << " " << dtype_name(t) << " input " << s.str();
    }
  }
}

// ---- refusals (no device needed) ----------------------------------------------------------------

void expect_refused(const ModelConfig& c, const std::string& feature) {
  auto model = make_model(c, 1);
  const std::string m = testing::message_of([&] { CudaModel gpu(*model); });
  EXPECT_NE(m.find(feature), std::string::npos) << m;
  EXPECT_NE(m.find(c.name), std::string::npos) << m;
  EXPECT_THROW(CudaModel gpu(*model), std::invalid_argument);
}

TEST(CudaModelRefuses, SwinV2) {
  ModelConfig c = small_swin("relbias");
  c.swin().v2 = true;
  expect_refused(c, "Swin V2");
}

TEST(CudaModelRefuses, SwigluAndMlpNorm) {
  ModelConfig c = small_vit("learned1d");
  c.vit().mlp = Mlp::swiglu;
  expect_refused(c, "'swiglu' MLP");
  c.vit().mlp_norm = true;
  expect_refused(c, "'swiglu' MLP");
}

TEST(CudaModelRefuses, ConditionalEncodings) {
  for (const std::string& spec : testing::every_encoding_spec()) {
    const std::string kind = conditional_kind(spec);
    if (!kind.empty()) expect_refused(small_vit(spec), "conditional encoding '" + kind + "'");
  }
}

// rope-dinov3 turns channel halves on offset coordinates; the kernel turns neighbouring pairs.
TEST(CudaModelRefuses, RotationTheKernelDoesNotTurn) {
  expect_refused(small_vit("rope-dinov3"), "attention encoding 'rope-dinov3'");
}

TEST(CudaModelRefuses, HeadDimsTheKernelLacks) {
  ModelConfig c = small_vit("learned1d");
  c.vit().heads = 8;  // 128 / 8 = 16
  expect_refused(c, "head dim 16");
}

// ---- logits against the CPU model ---------------------------------------------------------------

class CudaVitEveryEncoding : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaVitEveryEncoding, LogitsMatchCpu) {
  if (!conditional_kind(GetParam()).empty() || GetParam() == "rope-dinov3")
    GTEST_SKIP() << "refused (CudaModelRefuses)";
  VITPE_REQUIRE_CUDA();
  // The configured size, and another (the encodings' extension rules, a 5 x 4 grid).
  expect_matches(small_vit(GetParam()), {Shape{3, 3, 32, 24}, Shape{2, 3, 40, 32}}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Kinds, CudaVitEveryEncoding,
                         ::testing::ValuesIn(testing::every_encoding_spec()));

class CudaSwinEveryEncoding : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSwinEveryEncoding, LogitsMatchCpu) {
  if (GetParam() == "rope-dinov3") GTEST_SKIP() << "refused (CudaModelRefuses)";
  VITPE_REQUIRE_CUDA();
  // The configured size, and a square one (16 x 16 patches: stage grids 16, 8, 4).
  expect_matches(small_swin(GetParam()), {Shape{3, 3, 64, 32}, Shape{2, 3, 64, 64}}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CudaSwinEveryEncoding,
    ::testing::ValuesIn(testing::every_encoding_spec(AttentionLayout::windowed)));

TEST(CudaModel, VitRegistersAndMeanPooling) {
  VITPE_REQUIRE_CUDA();
  ModelConfig c = small_vit("learned1d+relbias");
  c.vit().reg_tokens = 4;
  c.vit().pool = Pool::avg;
  expect_matches(c, {Shape{2, 3, 32, 24}}, "registers, mean pooling");
  c.vit().class_token = false;
  c.vit().reg_tokens = 0;
  expect_matches(c, {Shape{2, 3, 32, 24}}, "no prefix tokens, mean pooling");
}

TEST(CudaModel, VitLayerScaleWithoutClassRow) {
  VITPE_REQUIRE_CUDA();
  ModelConfig c = small_vit("learned1d");
  c.vit().layer_scale = 0.1;
  c.vit().no_embed_class = true;
  c.vit().reg_tokens = 2;
  expect_matches(c, {Shape{2, 3, 32, 24}, Shape{1, 3, 16, 16}}, "layer scale, no class row");
}

TEST(CudaModel, VitDistillationToken) {
  VITPE_REQUIRE_CUDA();
  ModelConfig c = small_vit("sincos2d");
  c.vit().dist_token = true;
  expect_matches(c, {Shape{3, 3, 32, 24}}, "distillation token");
}

TEST(CudaModel, VitHeadDim128AndBatchOne) {
  VITPE_REQUIRE_CUDA();
  ModelConfig c = small_vit("rope-axial");
  c.vit().dim = 256;
  c.vit().mlp_dim = 512;
  expect_matches(c, {Shape{1, 3, 32, 24}}, "head dim 128");
}

TEST(CudaModel, DeviceInputEqualsHostInput) {
  VITPE_REQUIRE_CUDA();
  auto cpu = random_model(small_vit("relbias"), 3);
  CudaModel gpu(*cpu, DType::f32);
  const Tensor images = testing::random_tensor({2, 3, 32, 24}, 5);
  const Tensor from_host = gpu.forward(images).clone();
  const Tensor from_device = gpu.forward(images.to(Device::cuda)).clone();
  EXPECT_EQ(testing::max_rel_error(from_device, from_host), 0.0);
}

TEST(CudaModel, SteadyStateAllocatesNothing) {
  VITPE_REQUIRE_CUDA();
  for (const ModelConfig& c : {small_vit("rope-mixed"), small_swin("relbias")}) {
    auto cpu = random_model(c, 3);
    for (DType t : {DType::f32, DType::bf16}) {
      CudaModel gpu(*cpu, t);
      const Tensor images = testing::random_tensor({2, 3, c.img_rows, c.img_cols}, 5);
      gpu.forward(images);
      const int64_t before = storage_allocation_count();
      gpu.forward(images);
      gpu.forward(images);
      EXPECT_EQ(storage_allocation_count(), before) << c.name << " " << dtype_name(t);
    }
  }
}

TEST(CudaModel, SwinRefusesSizesItWouldPad) {
  VITPE_REQUIRE_CUDA();
  auto cpu = random_model(small_swin("relbias"), 3);
  CudaModel gpu(*cpu);
  // 18 x 8 patches: 18 is not a multiple of the 4-token window.
  const std::string m = testing::message_of([&] {
    gpu.forward(testing::random_tensor({1, 3, 72, 32}, 1));
  });
  EXPECT_NE(m.find("does not pad"), std::string::npos) << m;
  // The model still runs at its own size afterwards.
  EXPECT_EQ(gpu.forward(testing::random_tensor({1, 3, 64, 32}, 2)).shape(), Shape({1, 10}));
}

// The API's device choice: the bundled Fashion-MNIST ViT classifies the same input on both.
TEST(CudaClassifier, MatchesTheCpuClassifier) {
  VITPE_REQUIRE_CUDA();
  const std::string file = VITPE_SOURCE_DIR "/models/vit-fmnist.safetensors";
  ClassifierOptions on_gpu;
  on_gpu.device = Device::cuda;
  Classifier cpu(file), gpu(file, on_gpu);
  EXPECT_EQ(gpu.device(), Device::cuda);
  const Tensor images = testing::random_tensor({3, 1, 28, 28}, 9);
  const auto want = cpu.classify_preprocessed(images.f32(), 3, 3);
  const auto got = gpu.classify_preprocessed(images.f32(), 3, 3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t r = 0; r < want[i].size(); ++r) {
      EXPECT_EQ(got[i][r].index, want[i][r].index) << "image " << i << " rank " << r;
      EXPECT_NEAR(got[i][r].probability, want[i][r].probability, 1e-4);
    }
}

TEST(CudaClassifier, RefusesBf16EmulatedOnTheDevice) {
  ClassifierOptions o;
  o.device = Device::cuda;
  o.precision = Precision::bf16_emulated;
  const std::string m = testing::message_of(
      [&] { Classifier c(VITPE_SOURCE_DIR "/models/vit-fmnist.safetensors", o); });
  EXPECT_NE(m.find("bf16-emulated is a CPU mode"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
