// Tests of vit/io/classifier: one call from a cv::Mat to labelled probabilities with the model's
// own preprocessing; the same answers as the step-by-step path (`vitpe classify`); zero-copy
// input; one instance shared by several threads; clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <thread>

#include "ops/ops.h"
#include "tests/golden/synthetic_weights.h"
#include "tests/testing.h"
#include "vit/io/classifier.h"
#include "vit/io/safetensors.h"

namespace vitpe {
namespace {

const std::string kModel = std::string(VITPE_SOURCE_DIR) + "/models/vit-fmnist.safetensors";
const std::string kClassifierImages = std::string(VITPE_TEST_DATA) + "/images/";

// A 28x28 gray "image" with some structure (the bundled model's input).
cv::Mat pattern(int seed) {
  cv::Mat m(28, 28, CV_8UC1);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x)
      m.at<uint8_t>(y, x) = static_cast<uint8_t>((x * 9 + y * seed) % 256);
  return m;
}

TEST(TopK, SoftmaxOrderLabelsAndNonFiniteLogits) {
  const float logits[4] = {1.0f, 3.0f, 3.0f, -2.0f};
  const auto top = top_k(logits, 4, 3, {"a", "b", "c", "d"});
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].index, 1);  // ties: the lower index first
  EXPECT_EQ(top[1].index, 2);
  EXPECT_EQ(top[2].label, "a");
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-2.0);
  EXPECT_NEAR(top[0].probability, std::exp(3.0) / z, 1e-7);
  EXPECT_EQ(top_k(logits, 4, 10, {}).size(), 4u);
  EXPECT_EQ(top_k(logits, 4, 1, {})[0].label, "class 1");
  const float bad[2] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_NE(testing::message_of([&] { top_k(bad, 2, 1, {}); }).find("not finite"),
            std::string::npos);
}

// classify(cv::Mat) gives what the file path gives: decode, the model's transform, forward,
// softmax; a colour (BGR) image is converted as the model's channels require.
TEST(Classifier, EqualsTheStepByStepPath) {
  Classifier classifier(kModel);
  EXPECT_EQ(classifier.preprocess().rows, 28);
  EXPECT_EQ(classifier.preprocess().channels, 1);
  const std::string file = kClassifierImages + "rgb_67x45.png";
  const auto got = classifier.classify(cv::imread(file, cv::IMREAD_UNCHANGED), 3);

  LoadedModel m = load_model(kModel);
  const Tensor x = preprocess_files({file}, Preprocess::from(m.model->config()));
  const Tensor& logits = m.model->forward(x);
  const auto want = top_k(logits.f32(), logits.size(1), 3, m.model->config().labels);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].index, want[i].index);
    EXPECT_EQ(got[i].label, want[i].label);
    EXPECT_EQ(got[i].probability, want[i].probability);
  }
  EXPECT_EQ(got[0].label, kFashionMnistLabels[got[0].index]);
}

// The acceptance check of a timm user: timm's full vit_small_patch16_224 saved with
// safetensors.torch.save_file and its hub config.json beside it (mean = std = 0.5, crop 0.9,
// bicubic) -> the Classifier gives timm's top-5 on the committed JPEG and PNG (timm's own PIL
// transform, tests/golden/make_transform_goldens.py). The weights are synthetic, a function of
// each tensor's name (too large to store): the test writes the file under timm's names and
// checks its names and shapes against the hash of timm's state dict.
TEST(Classifier, TimmVitSmallWithItsConfigJsonGivesTimmsTop5) {
  const std::string dir_in = std::string(VITPE_TEST_DATA) + "/timm_vit_small/";
  nlohmann::json golden;
  std::ifstream(dir_in + "top5.json") >> golden;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("vitpe_timm_vit_small_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::vector<std::pair<std::string, Tensor>> tensors;
    auto model = make_model(preset("vit_small_patch16_224"), 0);
    for (Param* p : model->params()) {
      tensors.emplace_back(p->name, testing::synthetic_tensor(p->name, p->value.shape()));
    }
    ASSERT_EQ(testing::state_dict_hash(tensors), golden["state_dict_fnv1a64"].get<std::string>())
        << "the file written is not timm's state dict (names or shapes differ)";
    save_safetensors((dir / "model.safetensors").string(), tensors);
    std::filesystem::copy_file(dir_in + "config.json", dir / "config.json");
  }

  // --- what the application writes ---
  Classifier classifier((dir / "model.safetensors").string());
  for (const auto& [file, want] : golden["top5"].items()) {
    const auto top =
        classifier.classify(cv::imread(kClassifierImages + file, cv::IMREAD_UNCHANGED), 5);
    // ---
    ASSERT_EQ(top.size(), 5u) << file;
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(top[i].index, want[i][0].get<int64_t>()) << file << " rank " << i;
      EXPECT_NEAR(top[i].probability, want[i][1].get<double>(), 1e-6) << file << " rank " << i;
      EXPECT_EQ(top[i].label, imagenet_labels()[top[i].index]);
    }
  }
  // The preprocessing came from config.json (the file alone says nothing about it).
  EXPECT_EQ(classifier.preprocess().mean, std::vector<float>(3, 0.5f));
  EXPECT_DOUBLE_EQ(classifier.preprocess().crop_pct, 0.9);
  bool noted = false;
  for (const std::string& n : classifier.notes()) noted |= n.find("config.json") != n.npos;
  EXPECT_TRUE(noted);
  std::filesystem::remove_all(dir);
}

TEST(Classifier, BatchEqualsSingleCallsAndPreprocessedInputIsReadInPlace) {
  Classifier classifier(kModel);
  const std::vector<cv::Mat> images = {pattern(3), pattern(7), pattern(11)};
  const auto batch = classifier.classify(images, 2);
  ASSERT_EQ(batch.size(), 3u);
  for (size_t i = 0; i < images.size(); ++i) {
    const auto one = classifier.classify(images[i], 2);
    EXPECT_EQ(one[0].index, batch[i][0].index);
    EXPECT_NEAR(one[0].probability, batch[i][0].probability, 1e-6);
  }

  // The caller's buffer, preprocessed as preprocess() says, is not copied: a steady-state call
  // allocates no tensor storage at all.
  std::vector<float> buffer(3 * 28 * 28);
  for (size_t i = 0; i < images.size(); ++i) {
    preprocess_into(images[i], classifier.preprocess(), buffer.data() + i * 28 * 28);
  }
  classifier.classify_preprocessed(buffer.data(), 3, 2);  // warms the model's buffers
  const int64_t before = storage_allocation_count();
  const auto in_place = classifier.classify_preprocessed(buffer.data(), 3, 2);
  EXPECT_EQ(storage_allocation_count(), before);
  for (size_t i = 0; i < images.size(); ++i) {
    EXPECT_EQ(in_place[i][0].index, batch[i][0].index);
    EXPECT_NEAR(in_place[i][0].probability, batch[i][0].probability, 1e-6);
  }
}

// A CPU classifier never loads cuBLASLt: in a CUDA build it is loaded on the first GPU matmul
// (ops/cuda/cublaslt.h), since mapping it costs every process some 210 MiB and 60-100 ms.
TEST(Classifier, CpuCallsLeaveTheCudaMatmulLibraryUnloaded) {
  Classifier classifier(kModel);
  ASSERT_EQ(classifier.classify(pattern(5), 1).size(), 1u);
  std::ifstream maps("/proc/self/maps");
  ASSERT_TRUE(maps.good());
  std::string line;
  while (std::getline(maps, line)) EXPECT_EQ(line.find("libcublas"), std::string::npos) << line;
}

// One instance, four threads, each classifying a different image many times: every answer is
// the one a single thread gets (calls on one instance run one at a time, each with the
// instance's thread count; the callers' own thread settings are left as they were).
TEST(Classifier, OneInstanceIsSafeFromSeveralThreads) {
  ClassifierOptions options;
  options.threads = 1;
  Classifier classifier(kModel, options);
  std::vector<std::vector<Prediction>> expected;
  for (int t = 0; t < 4; ++t) expected.push_back(classifier.classify(pattern(3 + 4 * t), 3));
  const int before = num_threads();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 15; ++i) {
        const auto got = classifier.classify(pattern(3 + 4 * t), 3);
        for (size_t k = 0; k < 3; ++k) {
          mismatches[t] += got[k].index != expected[t][k].index ||
                           got[k].probability != expected[t][k].probability;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  EXPECT_EQ(num_threads(), before);
}

// Throughput streams: a batch split over 2 replicas gives the one-stream answers (to float
// rounding), the features too, and several threads' calls on one instance run on the replicas
// at once with the right answers; counts out of range are refused.
TEST(Classifier, StreamsGiveTheSameAnswersAndServeSeveralThreads) {
  ClassifierOptions one;
  one.threads = 2;
  one.adaptive_threads = false;
  Classifier single(kModel, one);
  ClassifierOptions two = one;
  two.streams = 2;
  Classifier streamed(kModel, two);
  EXPECT_EQ(streamed.streams(), 2);
  EXPECT_EQ(single.streams(), 1);
  std::vector<cv::Mat> images;
  for (int i = 0; i < 5; ++i) images.push_back(pattern(3 + 2 * i));
  const auto want = single.classify(images, 3);
  const auto got = streamed.classify(images, 3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i][0].index, want[i][0].index) << i;
    EXPECT_NEAR(got[i][0].probability, want[i][0].probability, 1e-5) << i;
  }
  const auto f1 = single.embed(images, true), f2 = streamed.embed(images, true);
  ASSERT_EQ(f2.size(), f1.size());
  for (size_t i = 0; i < f1.size(); ++i)
    for (size_t d = 0; d < f1[i].size(); ++d) EXPECT_NEAR(f2[i][d], f1[i][d], 1e-5);

  const int before = num_threads();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const auto p = streamed.classify(images[static_cast<size_t>(t)], 3);
        mismatches[t] += p[0].index != want[static_cast<size_t>(t)][0].index ||
                         std::abs(p[0].probability - want[static_cast<size_t>(t)][0].probability) >
                             1e-5f;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  EXPECT_EQ(num_threads(), before);

  ClassifierOptions bad = one;
  bad.streams = 0;
  EXPECT_THROW(Classifier(kModel, bad), std::invalid_argument);
  bad.streams = 65;
  EXPECT_THROW(Classifier(kModel, bad), std::invalid_argument);
}

// Adaptive threads (the default) may run some calls on 1 thread instead of 2 (its probes, by
// the 4th call): the answers are the fixed-thread ones to float rounding, and the caller's
// thread count is untouched.
TEST(Classifier, AdaptiveThreadsKeepTheAnswers) {
  const int before = num_threads();
  set_num_threads(2);
  ClassifierOptions fixed_options;
  fixed_options.adaptive_threads = false;
  Classifier fixed(kModel, fixed_options);
  ClassifierOptions adaptive_options;
  adaptive_options.adaptive_threads = true;
  Classifier adaptive(kModel, adaptive_options);
  const cv::Mat image = pattern(5);
  const auto expected = fixed.classify(image, 3);
  for (int i = 0; i < 12; ++i) {
    const auto got = adaptive.classify(image, 3);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(got[k].index, expected[k].index) << "call " << i;
      EXPECT_NEAR(got[k].probability, expected[k].probability, 1e-5) << "call " << i;
    }
    EXPECT_EQ(num_threads(), 2);
  }
  set_num_threads(before);
}

TEST(Classifier, BadInputsAreErrorsThatSayWhat) {
  Classifier classifier(kModel);
  EXPECT_NE(testing::message_of([&] { classifier.classify(cv::Mat(), 3); }).find("empty cv::Mat"),
            std::string::npos);
  const cv::Mat floats(28, 28, CV_32FC1, cv::Scalar(0.5));
  EXPECT_NE(testing::message_of([&] { classifier.classify(floats, 3); }).find("8- or 16-bit"),
            std::string::npos);
  EXPECT_NE(testing::message_of([&] {
              classifier.classify_preprocessed(nullptr, 1);
            }).find("null pointer"),
            std::string::npos);
  ClassifierOptions bad;
  bad.threads = 5000;
  EXPECT_NE(testing::message_of([&] { Classifier c(kModel, bad); }).find("threads"),
            std::string::npos);
  EXPECT_NE(testing::message_of([] {
              Classifier c("vit_smal_patch16_224");
            }).find("did you mean vit_small_patch16_224"),
            std::string::npos);
}

// The API's images in our own words: a float image names its samples (it once said "OpenCV depth
// 5"), a 3-D cv::Mat its dimensions (it once got OpenCV's assertion text), and a NaN input is
// blamed on the input, not on "NaN or Inf weights".
TEST(Classifier, ImagesItCannotTakeAreNamedInItsOwnWords) {
  Classifier classifier(kModel);
  const cv::Mat floats(28, 28, CV_32FC1, cv::Scalar(0.5));
  std::string m = testing::message_of([&] { classifier.classify(floats, 3); });
  EXPECT_NE(m.find("expected 8- or 16-bit unsigned samples, found 32-bit float samples"),
            std::string::npos)
      << m;
  const int sizes[] = {4, 28, 28};
  const cv::Mat cube(3, sizes, CV_8UC1, cv::Scalar(1));
  m = testing::message_of([&] { classifier.classify(cube, 3); });
  EXPECT_NE(m.find("expected a 2-D image (rows x cols with 1 to 4 channels), found 3 dimensions"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("Assertion"), std::string::npos) << m;
  std::vector<float> input(28 * 28, 0.0f);
  input[3 * 28 + 5] = std::nanf("");
  m = testing::message_of([&] { classifier.classify_preprocessed(input.data(), 1); });
  EXPECT_NE(m.find("image 0 of the batch holds a non-finite input value (nan at channel 0, row 3, "
                   "column 5)"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("weights"), std::string::npos) << m;
  // Finite input still classifies.
  input[3 * 28 + 5] = 0.0f;
  EXPECT_EQ(classifier.classify_preprocessed(input.data(), 1, 2).at(0).size(), 2u);
}

}  // namespace
}  // namespace vitpe
