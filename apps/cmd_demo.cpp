// `vitpe demo` (what scripts/demo runs): classifies sample Fashion-MNIST test images with the
// bundled checkpoint (exporting them as PNG), prints their top-3 classes, then runs
// `vitpe compare --quick` and says where the report is.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>

#include "apps/command.h"
#include "apps/train_options.h"
#include "vit/compare/compare.h"
#include "vit/io/checkpoint.h"
#include "vit/io/classifier.h"
#include "vit/io/data_files.h"
#include "vit/train/data.h"

namespace vitpe::app {
namespace {

namespace fs = std::filesystem;

struct DemoCli {
  std::string out = "demo-output";
  std::string checkpoint;
  std::string data_dir;
  int64_t samples = 8;
  bool no_compare = false;
};

void classify_samples(const DemoCli& c) {
  std::printf("== 1. Classifying Fashion-MNIST test images\n");
  DatasetOptions d;
  d.dir = c.data_dir;
  d.train = false;
  d.limit = c.samples;
  std::unique_ptr<Dataset> data;
  try {
    data = make_dataset(d);
  } catch (const std::exception& e) {
    std::printf("Fashion-MNIST is not available (%s); skipping this part.\n\n", e.what());
    return;
  }
  const fs::path dir = fs::path(c.out) / "samples";
  fs::create_directories(dir);
  const int64_t n = std::min<int64_t>(c.samples, data->size());
  const int64_t px = data->image_numel();
  Tensor images = Tensor::empty({n, 1, data->rows(), data->cols()});
  std::vector<int32_t> labels(static_cast<size_t>(n));
  std::vector<std::string> files;
  for (int64_t i = 0; i < n; ++i) {
    float* img = images.f32() + i * px;
    labels[i] = data->get(i, img);
    // Back to bytes for the PNG (undo the normalisation).
    cv::Mat m(static_cast<int>(data->rows()), static_cast<int>(data->cols()), CV_8UC1);
    for (int64_t k = 0; k < px; ++k) {
      float v = (img[k] * kFashionMnistStd + kFashionMnistMean) * 255.0f;
      m.data[k] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
    char name[64];
    std::snprintf(name, sizeof name, "test-%02lld.png", static_cast<long long>(i));
    cv::imwrite((dir / name).string(), m);
    files.push_back((dir / name).string());
  }
  std::printf("exported %lld test images to %s/\n", static_cast<long long>(n),
              dir.string().c_str());

  // The bundled checkpoint from the data folder (vit/io/data_files.h): this tree's build, or
  // share/vitpe of the prefix vitpe is installed in.
  std::string ckpt = c.checkpoint;
  if (ckpt.empty()) {
    try {
      ckpt = bundled_model();
    } catch (const std::exception& e) {
      std::printf("%s: skipping classification.\n\n", e.what());
      return;
    }
  }
  LoadedModel lm = load_model(ckpt);
  const Tensor& logits = lm.model->forward(images, false);
  const std::vector<std::string> names = data->labels();
  const int64_t C = logits.size(1);
  std::printf("checkpoint %s (encoding %s)\n", ckpt.c_str(),
              lm.model->config().encoding.str().c_str());
  int correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<Prediction> top = top_k(logits.f32() + i * C, C, 3, names);
    correct += top[0].index == labels[i];
    std::printf("%s  true: %-11s  top-3:", fs::path(files[i]).filename().string().c_str(),
                names[labels[i]].c_str());
    for (const Prediction& p : top)
      std::printf("  %s %.1f%%", p.label.c_str(), 100 * p.probability);
    std::printf("%s\n", top[0].index == labels[i] ? "" : "   (wrong)");
  }
  std::printf("%d of %lld correct\n\n", correct, static_cast<long long>(n));
}

void add_demo(CLI::App& root) {
  auto* cmd = root.add_subcommand("demo", "Classify sample images, then a quick comparison");
  auto c = std::make_shared<DemoCli>();
  cmd->add_option("--out", c->out, "Output directory")->capture_default_str();
  cmd->add_option(
      "--checkpoint", c->checkpoint,
      "Checkpoint (default: the bundled one, models/vit-fmnist.safetensors in the data folder)");
  cmd->add_option("--data-dir", c->data_dir, "Fashion-MNIST directory");
  cmd->add_option("--samples", c->samples, "Number of test images")->capture_default_str();
  cmd->add_flag("--no-compare", c->no_compare, "Skip the quick comparison");
  add_threads_option(cmd);
  cmd->callback([c] {
    classify_samples(*c);
    if (c->no_compare) return;
    std::printf(
        "== 2. Comparing positional encodings (vitpe compare --quick: five encodings on the "
        "procedural relation dataset, about 2 minutes on 2 cores)\n");
    std::fflush(stdout);
    CompareOptions o;
    o.out = (fs::path(c->out) / "compare").string();
    apply_quick_compare(o, [](const char*) { return false; });
    o.extra_settings = {{"command", "vitpe demo (vitpe compare --quick)"}};
    CompareResults r = run_compare(o);
    std::printf("\n%s\n", terminal_table(r).c_str());
    std::printf("report: %s\n", fs::absolute(fs::path(o.out) / "report.html").string().c_str());
  });
}

VITPE_COMMAND(90, "demo", computes, add_demo);

}  // namespace
}  // namespace vitpe::app
