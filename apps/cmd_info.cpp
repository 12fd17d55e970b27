// `vitpe info CHECKPOINT_OR_PRESET`: what a checkpoint holds and what it costs to run.
#include <fmt/core.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "apps/model_options.h"
#include "vit/models/family.h"
#include "vitpe/vitpe_version.h"

namespace vitpe::app {
namespace {

struct InfoOptions : ModelOptions {
  bool json = false;
};

void run_info(const InfoOptions& o) {
  LoadedModel loaded = load_model(o.model, o.load_options());
  Model& m = *loaded.model;
  const ModelConfig& c = m.config();
  const FamilyDef& family = family_of(c);
  if (o.json) {
    const nlohmann::json out = {{"model", o.model},
                                {"format", loaded.format},
                                {"written_by", loaded.written_by},
                                {"read_by", std::string("vitpe ") + version()},
                                {"family", c.family_label()},
                                {"notes", loaded.notes},
                                {"config", nlohmann::json::parse(c.to_json())},
                                {"parameters", m.num_params()},
                                {"encoding_parameters", m.num_encoding_params()},
                                {"gflops_per_image", m.flops_per_image() / 1e9}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%s\n", o.model.c_str());
  std::printf("  format        %s\n", loaded.format.c_str());
  if (!loaded.written_by.empty()) std::printf("  written by    %s\n", loaded.written_by.c_str());
  std::printf("  read by       vitpe %s\n", version());
  for (const auto& note : loaded.notes) std::printf("  note          %s\n", note.c_str());
  std::printf("  architecture  %s\n", c.family_label().c_str());
  std::printf("  preset        %s\n", c.name.c_str());
  std::printf("  input         %lld x %lld x %lld (channels x rows x cols), patch %lld\n",
              (long long)c.channels, (long long)c.img_rows, (long long)c.img_cols,
              (long long)c.patch);
  std::printf("  encoding      %s\n", c.encoding.str().c_str());
  for (const auto& [field, text] : family.info(c)) {
    std::printf("  %-13s %s\n", field.c_str(), text.c_str());
  }
  const PreprocessConfig& pre = c.preprocess;
  std::string mean, stdv;
  for (size_t i = 0; i < pre.mean.size(); ++i) {
    mean += (i ? "," : "") + fmt::format("{:g}", pre.mean[i]);
    stdv += (i ? "," : "") + fmt::format("{:g}", pre.std_dev[i]);
  }
  std::printf(
      "  preprocess    %s resize to %s / crop_pct %g (%s), crop %lld x %lld, mean %s, "
      "std %s\n",
      interpolation_name(pre.interpolation),
      pre.crop_mode == CropMode::squash ? "size" : "shorter side", pre.crop_pct,
      crop_mode_name(pre.crop_mode), (long long)c.img_rows, (long long)c.img_cols, mean.c_str(),
      stdv.c_str());
  std::printf("  classes       %lld%s\n", (long long)c.classes,
              c.labels.empty() ? " (no names)" : " (named)");
  std::printf("  parameters    %lld (%.2fM; encoding %lld)\n", (long long)m.num_params(),
              m.num_params() / 1e6, (long long)m.num_encoding_params());
  std::printf("  GFLOPs/image  %.3f (multiply-adds x 2)\n", m.flops_per_image() / 1e9);
}

void add_info(CLI::App& root) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = root.add_subcommand("info",
                                      "Show a checkpoint's (or preset's) configuration, "
                                      "encoding, parameters and GFLOPs per image");
  cmd->add_option("checkpoint", o->model, "Checkpoint (.safetensors) or preset name")->required();
  add_model_options(cmd, *o);
  add_preprocess_options(cmd, *o);
  cmd->add_flag("--json", o->json, "Print JSON (the config as stored in our files, notes, costs)");
  cmd->callback([o] { run_info(*o); });
}

VITPE_COMMAND(40, "info", light, add_info);

}  // namespace
}  // namespace vitpe::app
