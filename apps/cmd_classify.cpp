// `vitpe classify --model CHECKPOINT_OR_PRESET [--labels FILE] [--topk 5] [--json]
// [--device cpu|cuda] IMAGES...`: top-k classes per image, with timm's evaluation preprocessing,
// in batches. An unreadable image gets an error naming it; the others are still classified; the
// exit code is 1 when any image failed. --device cuda runs the model on the GPU
// (vit/models/cuda_model.h; precision f32 or bf16) and fails with a message without one.
// Paths and labels come from outside: JSON gets them with the bytes that are not UTF-8 written
// \xNN (utf8_safe), text output with control characters escaped too (printable).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "apps/model_options.h"
#include "ops/adaptive_threads.h"
#include "ops/util.h"
#include "vit/io/classifier.h"
#include "vit/io/preprocess.h"
#include "vit/models/cuda_model.h"

namespace vitpe::app {
namespace {

struct ClassifyOptions : ModelOptions {
  std::vector<std::string> images;
  int topk = 5;
  int batch = 16;
  bool json = false;
  std::string device = "cpu";
  bool fixed_threads = false;
};

void run_classify(const ClassifyOptions& o) {
  LoadedModel loaded = load_model(o.model, o.load_options());
  Model& model = *loaded.model;
  const Precision precision = parse_precision(o.precision);
  std::unique_ptr<CudaModel> gpu;
  if (o.device == "cuda") {
    DType dtype = DType::f32;
    try {
      dtype = cuda_dtype(precision, "classify --device cuda");
    } catch (const std::invalid_argument& e) {
      throw ExitError{2, e.what()};
    }
    gpu = std::make_unique<CudaModel>(model, dtype);
  } else {
    model.set_precision(precision);
  }
  const ModelConfig& c = model.config();
  if (c.classes == 0) {
    throw ExitError{2, printable(o.model) +
                           ": the model has no classifier head (classes 0: an image encoder, such "
                           "as DINOv2's or SigLIP's): `vitpe embed` writes its features"};
  }
  if (!o.json) {
    for (const auto& note : loaded.notes) {
      std::fprintf(stderr, "note: %s\n", printable_lines(note).c_str());
    }
  }
  const Preprocess pre = Preprocess::from(c);

  // Batches run on fewer threads when that is faster on a busy machine (ops/adaptive_threads.h).
  AdaptiveThreads adaptive(!o.fixed_threads && adaptive_threads_default());
  nlohmann::json results = nlohmann::json::array();
  int failures = 0;
  for (size_t start = 0; start < o.images.size(); start += o.batch) {
    const size_t end = std::min(o.images.size(), start + o.batch);
    std::vector<std::string> paths(o.images.begin() + start, o.images.begin() + end);
    std::vector<std::string> errors;
    Tensor x = preprocess_files(paths, pre, &errors);
    const Tensor* out = nullptr;
    if (gpu) {
      out = &gpu->forward(x);
    } else {
      AdaptiveThreads::Call call(adaptive, static_cast<uint64_t>(x.size(0)));
      out = &model.forward(x);
    }
    const Tensor& logits = *out;
    for (size_t i = 0; i < paths.size(); ++i) {
      nlohmann::json r;
      r["image"] = utf8_safe(paths[i]);
      if (!is_utf8(paths[i])) {
        r["note"] = "the path is not valid UTF-8: its other bytes are written \\xNN";
      }
      // An image that failed (unreadable, or non-finite logits) is reported and skipped.
      auto failed = [&](const std::string& message) {
        ++failures;
        r["error"] = utf8_safe(message);
        if (!o.json) std::fprintf(stderr, "vitpe: error: %s\n", printable(message).c_str());
        results.push_back(r);
      };
      if (!errors[i].empty()) {
        failed(errors[i]);
        continue;
      }
      std::vector<Prediction> top;
      try {
        top = top_k(logits.f32() + i * c.classes, c.classes, o.topk, c.labels);
      } catch (const std::runtime_error& e) {
        failed(paths[i] + ": " + e.what());
        continue;
      }
      if (!o.json) std::printf("%s\n", printable(paths[i]).c_str());
      int rank = 0;
      for (const Prediction& t : top) {
        r["top"].push_back(
            {{"index", t.index}, {"label", utf8_safe(t.label)}, {"probability", t.probability}});
        if (!o.json) {
          std::printf("  %d. %-28s %6.2f%%  (class %lld)\n", ++rank, printable(t.label).c_str(),
                      100.0 * t.probability, static_cast<long long>(t.index));
        }
      }
      results.push_back(r);
    }
  }
  if (o.json) std::printf("%s\n", results.dump(2).c_str());
  if (failures) {
    throw ExitError{1, std::to_string(failures) + " of " + std::to_string(o.images.size()) +
                           " images could not be classified"};
  }
}

void setup(CLI::App& root) {
  auto o = std::make_shared<ClassifyOptions>();
  CLI::App* cmd = root.add_subcommand("classify", "Classify images: top-k classes per image");
  cmd->add_option("--model,-m", o->model, "Checkpoint (.safetensors) or preset name")->required();
  cmd->add_option("images", o->images, "Image files: PNG, JPEG, BMP, WebP, TIFF or PNM")
      ->required();
  // A whole number from 1; more than the model's classes prints them all.
  cmd->add_option("--topk,-k", o->topk, "Classes to print per image")
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              parse_whole(text, "--topk", 1, 1 << 20);
            } catch (const ExitError&) {
              return "'" + text + "' is not a whole number from 1 to the class count";
            }
            return std::string();
          },
          "a whole number from 1 to the class count"));
  cmd->add_option("--batch", o->batch, "Images per forward pass")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->add_flag("--fixed-threads", o->fixed_threads,
                "Run every batch on all the threads; by default a batch runs on fewer when that "
                "is faster on a busy machine (VITPE_ADAPTIVE_THREADS=0 makes fixed the default)");
  add_model_options(cmd, *o);
  add_preprocess_options(cmd, *o);
  add_precision_option(cmd, o->precision);
  cmd->add_option("--device", o->device, "Where the model runs: cpu or cuda (an NVIDIA GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->callback([o] { run_classify(*o); });
}

VITPE_COMMAND(10, setup);

}  // namespace
}  // namespace vitpe::app
