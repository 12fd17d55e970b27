// `vitpe convert IN OUT`: a timm/torchvision safetensors file -> our self-describing format
// (timm names, f32, the model config in the metadata), written atomically.
#include <cstdio>
#include <memory>

#include "apps/command.h"
#include "apps/model_options.h"

namespace vitpe::app {
namespace {

struct ConvertOptions : ModelOptions {
  std::string out;
};

void run_convert(const ConvertOptions& o) {
  LoadedModel loaded = load_model(o.model, o.load_options());
  for (const auto& note : loaded.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  save_model(*loaded.model, o.out, {{"vitpe.converted_from", loaded.format}});
  const ModelConfig& c = loaded.model->config();
  std::printf("wrote %s (%s, %lld parameters, encoding %s)\n", o.out.c_str(),
              c.family_label().c_str(), (long long)loaded.model->num_params(),
              c.encoding.str().c_str());
}

void add_convert(CLI::App& root) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = root.add_subcommand(
      "convert", "Convert a timm or torchvision ViT/Swin safetensors file to vitpe's format");
  cmd->add_option("input", o->model, "timm or torchvision .safetensors")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("output", o->out, "Output .safetensors")->required();
  add_model_options(cmd, *o);
  add_preprocess_options(cmd, *o);
  cmd->callback([o] { run_convert(*o); });
}

VITPE_COMMAND(50, "convert", light, add_convert);

}  // namespace
}  // namespace vitpe::app
