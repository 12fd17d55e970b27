// `vitpe eval`: accuracy and loss of a checkpoint on a dataset's test split at several image
// sizes (encodings resampled as at inference), under each extension policy asked for (--policy:
// how the encodings meet a grid other than the trained one).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "apps/model_options.h"
#include "ops/ops.h"
#include "ops/util.h"
#include "vit/io/checkpoint.h"
#include "vit/train/data.h"
#include "vit/train/train.h"

namespace vitpe::app {
namespace {

struct EvalCli {
  std::string model;
  DatasetOptions data;
  std::string sizes;
  std::string policies = "native";
  std::string protocol;
  int64_t batch = 256;
  bool train_split = false;
  bool no_progress = false;
  bool json = false;
  bool by_index = false;
  std::string precision = "f32";
};

void setup(CLI::App& root) {
  auto* cmd = root.add_subcommand("eval", "Evaluate a checkpoint on a dataset at several sizes");
  auto c = std::make_shared<EvalCli>();
  cmd->add_option("--model", c->model, "Checkpoint (.safetensors) or preset")->required();
  cmd->add_option("--dataset", c->data.name,
                  "fashion-mnist, procedural (spatial relations), quadrant (absolute-position "
                  "probe), or folder:PATH")
      ->capture_default_str();
  cmd->add_option("--data-dir", c->data.dir, "Data directory");
  cmd->add_option("--data-seed", c->data.seed, "Seed of the procedural dataset")
      ->capture_default_str();
  cmd->add_option("--sizes", c->sizes, "Image sizes, comma separated (default: the model's)");
  cmd->add_option("--policy", c->policies,
                  "How the encodings meet other sizes, comma separated: native (each kind's own "
                  "rule), interpolate (coordinates rescaled into the trained range), extrapolate "
                  "(integer coordinates past it; learned tables hold their edges). Each is "
                  "evaluated; the trained size once")
      ->capture_default_str();
  cmd->add_option("--protocol", c->protocol,
                  "How sizes other than the model's are rendered: zoom (the image at the model's "
                  "size resized), canvas (same-size objects on a larger canvas), dilute, "
                  "translate, spread (see `vitpe compare --help`). Default: the dataset's own rule")
      ->check([](const std::string& v) -> std::string {
        try {
          protocol_description(v);
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
        return "";
      });
  cmd->add_option("--subset", c->data.limit, "Use the first N samples (0: all)");
  cmd->add_option("--batch", c->batch, "Batch size")->capture_default_str();
  cmd->add_flag("--train-split", c->train_split, "Evaluate on the training split");
  cmd->add_flag("--no-progress", c->no_progress, "No progress bars");
  cmd->add_flag("--classes-by-index", c->by_index,
                "Take the dataset's class i to be the model's class i without comparing their "
                "names (folders named otherwise than the model's labels, e.g. ImageNet's "
                "synsets); the counts must still match");
  cmd->add_flag("--json", c->json, "Print JSON instead of the table (progress still on stderr)");
  add_threads_option(cmd);
  add_precision_option(cmd, c->precision);
  cmd->callback([c] {
    LoadedModel lm = load_model(c->model);
    Model& model = *lm.model;
    model.set_precision(parse_precision(c->precision));
    const ModelConfig& cfg = model.config();
    std::vector<int64_t> sizes =
        c->sizes.empty() ? std::vector<int64_t>{cfg.img_rows}
                         : parse_whole_list(c->sizes, "--sizes (e.g. 28,36,44)", 1, 16384);
    const std::vector<ExtensionPolicy> policies = parse_policy_list(c->policies, "--policy");
    // Paths are bytes; JSON holds UTF-8.
    nlohmann::json out = {{"model", utf8_safe(c->model)},
                          {"preset", cfg.name},
                          {"encoding", cfg.encoding.str()},
                          {"precision", c->precision},
                          {"dataset", utf8_safe(c->data.name)},
                          {"protocol", c->protocol.empty() ? "dataset's own" : c->protocol},
                          {"split", c->train_split ? "train" : "test"},
                          {"results", nlohmann::json::array()}};
    // The dataset at a size: photos get the model's own evaluation transform (timm's eval).
    auto data_at = [&](int64_t s) {
      DatasetOptions d = c->data;
      d.train = c->train_split;
      d.rows = d.cols = s;
      d.protocol = c->protocol;
      d.base_rows = cfg.img_rows;
      d.base_cols = cfg.img_cols;
      if (d.name == "folder" || d.name.rfind("folder:", 0) == 0) {
        Preprocess transform = Preprocess::from(cfg);
        transform.rows = transform.cols = static_cast<int>(s);
        d.transform = transform;
      }
      return d;
    };
    {
      // Before anything is printed: every size has the same classes and channels.
      const std::unique_ptr<Dataset> data = make_dataset(data_at(sizes.front()));
      if (data->channels() != cfg.channels) {
        throw ExitError{2, "the model expects " + std::to_string(cfg.channels) +
                               " channels; dataset " + data->name() + " has " +
                               std::to_string(data->channels())};
      }
      std::string note;
      try {
        note =
            check_model_classes(cfg.labels, cfg.classes, *data, c->by_index, "--classes-by-index");
      } catch (const std::invalid_argument& e) {
        throw ExitError{2, c->model + " on " + c->data.name + ": " + e.what()};
      }
      if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    if (!c->json) {
      std::printf("%s (%s, encoding %s, %s linears) on %s %s\n", c->model.c_str(), cfg.name.c_str(),
                  cfg.encoding.str().c_str(), c->precision.c_str(), c->data.name.c_str(),
                  c->train_split ? "train" : "test");
      std::printf("%6s  %-11s  %9s  %7s  %8s  %7s  %s\n", "size", "policy", "accuracy", "loss",
                  "images", "img/s", "extension rules");
    }
    for (int64_t s : sizes) {
      const DatasetOptions d = data_at(s);
      std::unique_ptr<Dataset> data = make_dataset(d);
      if (!c->json && (d.transform ? s == sizes.front() : s != cfg.img_rows)) {
        std::printf("images @%lld: %s\n", static_cast<long long>(s),
                    data->other_size_rule().c_str());
      }
      // The trained size: no part meets another grid, so one evaluation stands for every policy.
      const bool built = s == cfg.img_rows && s == cfg.img_cols;
      for (size_t k = 0; k < (built ? 1 : policies.size()); ++k) {
        const ExtensionPolicy policy = built ? ExtensionPolicy::native : policies[k];
        model.set_extension_policy(policy);
        const std::string label = built ? "(trained)" : policy_name(policy);
        const std::string rules = built ? "-" : model.extension_rules();
        EvalResult r = evaluate(model, *data, c->batch, !c->no_progress,
                                "@" + std::to_string(s) + (built ? "" : " " + label));
        const double per_s = r.count / std::max(1e-9, r.seconds);
        out["results"].push_back({{"size", s},
                                  {"policy", built ? "trained size" : label},
                                  {"extension_rules", rules},
                                  {"accuracy", r.accuracy},
                                  {"loss", r.loss},
                                  {"images", r.count},
                                  {"img_per_s", per_s}});
        if (!c->json) {
          std::printf("%6lld  %-11s  %8.2f%%  %7.4f  %8lld  %7.0f  %s\n", static_cast<long long>(s),
                      label.c_str(), 100 * r.accuracy, r.loss, static_cast<long long>(r.count),
                      per_s, rules.c_str());
          std::fflush(stdout);
        }
      }
    }
    if (c->json) std::printf("%s\n", out.dump(2).c_str());
  });
}

VITPE_COMMAND(41, setup);

}  // namespace
}  // namespace vitpe::app
