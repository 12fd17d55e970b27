// `vitpe embed --model CHECKPOINT_OR_PRESET IMAGES|FOLDER --out FILE [--normalize] [--batch 32]`:
// each image's features, the pooled vector the model's head reads (timm's forward_head(x,
// pre_logits=True); an image encoder's embedding: DINOv2, CLIP, SigLIP), with the model's
// preprocessing, in batches, with a progress bar. FILE by its extension: .safetensors (tensor
// "features" [N, D] f32, the images' paths in the metadata "images" as a JSON list), .npy ([N, D]
// float32) or .csv (one row per image: its path, then D values; for small sets). Rows follow the
// images in the order given (a folder: its image files, recursively, sorted by path). Nothing is
// written unless every image embeds: an unreadable image, an empty folder or a bad --out is an
// error naming it, and an existing FILE is kept unless --overwrite; the file is written whole
// (a temporary file renamed) or not at all.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "apps/image_inputs.h"
#include "apps/model_options.h"
#include "ops/files.h"
#include "ops/util.h"
#include "vit/io/preprocess.h"
#include "vit/io/safetensors.h"
#include "vit/train/train.h"

namespace vitpe::app {
namespace {

namespace fs = std::filesystem;

struct EmbedOptions : ModelOptions {
  std::vector<std::string> inputs;
  std::string out;
  int batch = 32;
  bool normalize = false;
  bool overwrite = false;
  bool no_progress = false;
};

enum class OutFormat { safetensors, npy, csv };

OutFormat out_format(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  if (e == ".safetensors") return OutFormat::safetensors;
  if (e == ".npy") return OutFormat::npy;
  if (e == ".csv") return OutFormat::csv;
  throw ExitError{2, "--out " + printable(path) + ": expected a .safetensors, .npy or .csv file, "
                     "found the extension '" + printable(e) + "'"};
}

// The output path checked before any work: its folder exists, and it is not there already
// (unless --overwrite) nor a folder.
void check_out(const EmbedOptions& o) {
  (void)out_format(o.out);
  const fs::path p(o.out);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw ExitError{2, "--out " + printable(o.out) + ": the folder " + printable(dir.string()) +
                           " does not exist"};
  }
  if (fs::is_directory(p, ec)) {
    throw ExitError{2, "--out " + printable(o.out) + ": is a folder, expected a file name"};
  }
  if (fs::exists(p, ec) && !o.overwrite) {
    throw ExitError{2, "--out " + printable(o.out) +
                           ": exists already (kept; pass --overwrite to replace it)"};
  }
}

std::string npy_bytes(const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Magic, version 1.0, header length: the whole preamble a multiple of 64 bytes, ending in \n.
  const size_t preamble = 10;
  const size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const uint16_t len = static_cast<uint16_t>(header.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return out;
}

void run_embed(const EmbedOptions& o) {
  check_out(o);
  const std::vector<std::string> paths = image_inputs(o.inputs);
  LoadedModel loaded = load_model(o.model, o.load_options());
  Model& model = *loaded.model;
  model.set_precision(parse_precision(o.precision));
  for (const auto& note : loaded.notes) {
    std::fprintf(stderr, "note: %s\n", printable_lines(note).c_str());
  }
  const Preprocess pre = Preprocess::from(model.config());
  const int64_t N = static_cast<int64_t>(paths.size());
  int64_t D = 0;
  std::vector<float> features;
  Progress progress("embed", N, stderr, !o.no_progress);
  const double start = monotonic_seconds();
  for (int64_t from = 0; from < N; from += o.batch) {
    const int64_t to = std::min<int64_t>(N, from + o.batch);
    const std::vector<std::string> part(paths.begin() + from, paths.begin() + to);
    const Tensor x = preprocess_files(part, pre);  // throws naming the first unreadable image
    const Model::Features f = model.forward_features(x);
    const Tensor& pooled = *f.pooled;
    D = pooled.size(1);
    for (int64_t i = 0; i < pooled.size(0); ++i) {
      const float* row = pooled.f32() + i * D;
      double sq = 0;
      for (int64_t j = 0; j < D; ++j) {
        if (!std::isfinite(row[j])) {
          throw ExitError{1, printable(part[i]) + ": its features are not finite"};
        }
        sq += static_cast<double>(row[j]) * row[j];
      }
      const double scale = o.normalize && sq > 0 ? 1.0 / std::sqrt(sq) : 1.0;
      for (int64_t j = 0; j < D; ++j) features.push_back(static_cast<float>(row[j] * scale));
    }
    const double elapsed = monotonic_seconds() - start;
    progress.update(to, "", elapsed > 0 ? to / elapsed : 0);
  }
  const double elapsed = monotonic_seconds() - start;
  progress.finish("", elapsed > 0 ? N / elapsed : 0);

  switch (out_format(o.out)) {
    case OutFormat::safetensors: {
      nlohmann::json names = nlohmann::json::array();
      for (const std::string& p : paths) names.push_back(utf8_safe(p));
      Tensor t = Tensor::empty({N, D});
      std::memcpy(t.f32(), features.data(), features.size() * sizeof(float));
      save_safetensors(o.out, {{"features", t}},
                       {{"images", names.dump()},
                        {"model", utf8_safe(o.model)},
                        {"normalized", o.normalize ? "true" : "false"}});
      break;
    }
    case OutFormat::npy:
      write_file_atomic(o.out, npy_bytes(features, N, D));
      break;
    case OutFormat::csv: {
      std::string text = "image";
      for (int64_t j = 0; j < D; ++j) text += ",f" + std::to_string(j);
      text += '\n';
      char buf[32];
      for (int64_t i = 0; i < N; ++i) {
        text += csv_field(utf8_safe(paths[i]));
        for (int64_t j = 0; j < D; ++j) {
          std::snprintf(buf, sizeof buf, ",%.9g", features[i * D + j]);
          text += buf;
        }
        text += '\n';
      }
      write_file_atomic(o.out, text);
      break;
    }
  }
  std::fprintf(stderr, "vitpe: %lld images x %lld features -> %s\n", static_cast<long long>(N),
               static_cast<long long>(D), printable(o.out).c_str());
}

void add_embed(CLI::App& root) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* cmd = root.add_subcommand(
      "embed", "Image features (the pooled vector before the head) into a .safetensors, .npy or "
               ".csv file");
  cmd->add_option("--model,-m", o->model, "Checkpoint (.safetensors) or preset name")->required();
  cmd->add_option("images", o->inputs,
                  "Image files, or folders (their image files, recursively, sorted by path)")
      ->required();
  cmd->add_option("--out,-o", o->out,
                  "Output file: .safetensors (features [N, D] + the paths), .npy or .csv")
      ->required();
  cmd->add_flag("--normalize", o->normalize, "Scale each vector to unit L2 norm (cosine search)");
  cmd->add_flag("--overwrite", o->overwrite, "Replace --out when it exists");
  cmd->add_option("--batch", o->batch, "Images per forward pass")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  add_model_options(cmd, *o, /*with_labels=*/false);
  add_preprocess_options(cmd, *o);
  add_precision_option(cmd, o->precision);
  cmd->callback([o] { run_embed(*o); });
}

VITPE_COMMAND(15, "embed", computes, add_embed);

}  // namespace
}  // namespace vitpe::app
