// `vitpe classify --model CHECKPOINT_OR_PRESET [--labels FILE] [--topk 5] [--json]
// [--results-file FILE [--results-format csv|json]] [--device cpu|cuda] IMAGES|FOLDERS...`: top-k
// classes per image, with timm's evaluation preprocessing, in batches (decoded and preprocessed in
// parallel); a folder stands for its image files, recursively, sorted by path. An unreadable image
// gets an error naming it; the others are still classified; the exit code is 1 when any image
// failed. --results-file writes one row per image as timm's inference.py does (path, then the
// top-k indices, labels and probabilities; a failed image's row names its error), whole or not at
// all, with a progress bar on stderr. --device cuda runs the model on the GPU
// (vit/models/cuda_model.h; precision f32 or bf16) and fails with a message without one.
// Paths and labels come from outside: JSON gets them with the bytes that are not UTF-8 written
// \xNN (utf8_safe), text output with control characters escaped too (printable).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/core/mat.hpp>

#include "apps/command.h"
#include "apps/image_inputs.h"
#include "apps/model_options.h"
#include "apps/video/video_source.h"
#include "ops/adaptive_threads.h"
#include "ops/files.h"
#include "ops/util.h"
#include "vit/io/classifier.h"
#include "vit/io/preprocess.h"
#include "vit/models/cuda_model.h"
#include "vit/train/train.h"

namespace vitpe::app {
namespace {

struct ClassifyOptions : ModelOptions {
  std::vector<std::string> images;
  int topk = 5;
  int batch = 16;
  bool json = false;
  std::string results_file, results_format;
  bool no_progress = false, overwrite = false;
  std::string video;
  int64_t every = 1, max_frames = 0;
  std::string device = "cpu";
  bool fixed_threads = false;
};

// csv or json: --results-format, else the file's extension.
std::string results_format(const ClassifyOptions& o) {
  if (!o.results_format.empty()) return o.results_format;
  std::string e = std::filesystem::path(o.results_file).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  if (e == ".csv") return "csv";
  if (e == ".json") return "json";
  throw ExitError{2, "--results-file " + printable(o.results_file) +
                         ": expected a .csv or .json file, or --results-format csv|json"};
}

// timm's inference.py table: image, then top-k indices, labels and probabilities; an error column
// for the images that failed. The rows' text is UTF-8 already (utf8_safe as they were made).
std::string results_csv(const nlohmann::json& results, int k) {
  std::string out = "image";
  for (int i = 1; i <= k; ++i) {
    out += ",index_" + std::to_string(i) + ",label_" + std::to_string(i) + ",prob_" +
           std::to_string(i);
  }
  out += ",error\n";
  char buf[32];
  for (const nlohmann::json& r : results) {
    out += csv_field(r["image"].get<std::string>());
    const size_t n = r.contains("top") ? r["top"].size() : 0;
    for (int i = 0; i < k; ++i) {
      if (static_cast<size_t>(i) < n) {
        const nlohmann::json& t = r["top"][i];
        std::snprintf(buf, sizeof buf, "%.6g", t["probability"].get<double>());
        out += "," + std::to_string(t["index"].get<int64_t>()) + "," +
               csv_field(t["label"].get<std::string>()) + "," + buf;
      } else {
        out += ",,,";
      }
    }
    out += "," + (r.contains("error") ? csv_field(r["error"].get<std::string>()) : "") + "\n";
  }
  return out;
}

void run_classify(const ClassifyOptions& o) {
  const std::string format = o.results_file.empty() ? "" : results_format(o);
  if (!o.results_file.empty()) {
    const std::filesystem::path dir = std::filesystem::path(o.results_file).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      throw ExitError{2, "--results-file " + printable(o.results_file) + ": the folder " +
                             printable(dir.string()) + " does not exist"};
    }
    if (std::filesystem::exists(o.results_file, ec) && !o.overwrite) {
      throw ExitError{2, "--results-file " + printable(o.results_file) +
                             ": exists already (kept; pass --overwrite to replace it)"};
    }
  }
  if (o.video.empty() == o.images.empty()) {
    throw ExitError{2, o.video.empty() ? "classify: give images or folders, or --video SOURCE"
                                       : "classify: --video reads frames instead of images: "
                                         "give one or the other"};
  }
  const std::vector<std::string> images =
      o.video.empty() ? image_inputs(o.images) : std::vector<std::string>{};
  // A video file, or a camera by its number (apps/video/video_source.h: OpenCV's videoio in a
  // module loaded here, not at the command's start).
  std::unique_ptr<VideoSource> video;
  if (!o.video.empty()) {
    video = open_video(o.video);
    if (!video) {
      throw ExitError{1, "--video " + printable(o.video) + ": cannot be opened (" +
                             (is_digits(o.video) ? "no camera of that number"
                                                 : "a missing file, or a format "
                                                   "OpenCV's video backends cannot "
                                                   "read") +
                             ")"};
    }
  }
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
  Progress progress("classify", static_cast<int64_t>(images.size()), stderr,
                    !o.results_file.empty() && !o.no_progress && o.video.empty());
  const double t0 = monotonic_seconds();
  size_t next = 0;
  int64_t frame = 0, frames_read = 0;
  const double fps = o.video.empty() ? 0 : video->fps();
  // The next batch: image paths, or every --every'th video frame; its names, input and errors.
  auto next_batch = [&](std::vector<std::string>& paths, Tensor& x,
                        std::vector<std::string>& errors) {
    paths.clear();
    errors.clear();
    if (o.video.empty()) {
      if (next >= images.size()) return false;
      const size_t end = std::min(images.size(), next + o.batch);
      paths.assign(images.begin() + next, images.begin() + end);
      next = end;
      x = preprocess_files(paths, pre, &errors);
      return true;
    }
    std::vector<cv::Mat> frames;
    cv::Mat f;
    while (static_cast<int64_t>(frames.size()) < o.batch &&
           (o.max_frames == 0 || frames_read < o.max_frames) && video->read(f)) {
      if (frame++ % o.every != 0) continue;
      ++frames_read;
      char name[96];
      if (fps > 0) {
        std::snprintf(name, sizeof name, "frame %lld (%.3f s)", static_cast<long long>(frame - 1),
                      (frame - 1) / fps);
      } else {
        std::snprintf(name, sizeof name, "frame %lld", static_cast<long long>(frame - 1));
      }
      paths.push_back(name);
      frames.push_back(f.clone());
    }
    if (frames.empty()) return false;
    x = Tensor::empty({static_cast<int64_t>(frames.size()), pre.channels, pre.rows, pre.cols});
    const size_t per = static_cast<size_t>(pre.channels) * pre.rows * pre.cols;
    errors.assign(frames.size(), "");
    const auto n = static_cast<int64_t>(frames.size());
#pragma omp parallel for schedule(dynamic) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
      try {
        preprocess_into(to_uint8_channels(frames[i], pre.channels, paths[i]), pre,
                        x.f32() + i * per);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
    return true;
  };
  std::vector<std::string> paths, errors;
  Tensor x;
  int64_t done = 0;
  while (next_batch(paths, x, errors)) {
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
      r["image"] = utf8_safe(o.video.empty() ? paths[i] : o.video + " " + paths[i]);
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
    done += static_cast<int64_t>(paths.size());
    const double elapsed = monotonic_seconds() - t0;
    progress.update(done, "", elapsed > 0 ? done / elapsed : 0);
  }
  if (!o.video.empty() && done == 0) {
    throw ExitError{1, "--video " + printable(o.video) + ": no frame could be read"};
  }
  if (!o.results_file.empty()) {
    const double elapsed = monotonic_seconds() - t0;
    progress.finish("", elapsed > 0 ? done / elapsed : 0);
    write_file_atomic(o.results_file,
                      format == "csv" ? results_csv(results, o.topk) : results.dump(2) + "\n");
  }
  if (o.json) std::printf("%s\n", results.dump(2).c_str());
  if (failures) {
    throw ExitError{1, std::to_string(failures) + " of " + std::to_string(done) +
                           (o.video.empty() ? " images" : " frames") + " could not be classified"};
  }
}

void add_classify(CLI::App& root) {
  auto o = std::make_shared<ClassifyOptions>();
  CLI::App* cmd = root.add_subcommand("classify", "Classify images: top-k classes per image");
  cmd->add_option("--model,-m", o->model, "Checkpoint (.safetensors) or preset name")->required();
  cmd->add_option("images", o->images,
                  "Image files (PNG, JPEG, BMP, WebP, TIFF or PNM), or folders of them "
                  "(recursively, sorted by path)");
  cmd->add_option("--video", o->video,
                  "Classify a video's frames instead: a file, or a camera's number (0: the first)");
  cmd->add_option("--every", o->every, "With --video: every N-th frame")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-frames", o->max_frames,
                  "With --video: stop after this many classified frames (0: the whole video)")
      ->check(CLI::NonNegativeNumber);
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
  cmd->add_option("--results-file", o->results_file,
                  "Also write one row per image (path, top-k indices, labels, probabilities; "
                  "errors) to this file, as timm's inference.py");
  cmd->add_flag("--overwrite", o->overwrite, "Replace --results-file when it exists");
  cmd->add_option("--results-format", o->results_format,
                  "csv or json (default: the results file's extension)")
      ->check(CLI::IsMember({"csv", "json"}));
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar with --results-file");
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

VITPE_COMMAND(10, "classify", computes, add_classify);

}  // namespace
}  // namespace vitpe::app
