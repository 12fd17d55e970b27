// `vitpe eval`: accuracy and loss of a checkpoint on a dataset's test split at several image
// sizes (encodings resampled as at inference), under each extension policy asked for (--policy:
// how the encodings meet a grid other than the trained one). Each row is timm's validate record
// too (top-1, top-5, their errors, loss, param_count in millions, img_size, crop_pct,
// interpolation); --class-map names the model class of each dataset class (a folder of a few
// ImageNet classes against a 1000-class model) and --valid-labels scores only those model
// classes, as timm's validate.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
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

struct EvalCli : ModelOptions {
  std::string class_map, valid_labels;
  DatasetOptions data;
  std::string sizes;
  std::string policies = "native";
  std::string protocol;
  int64_t batch = 256;
  bool train_split = false;
  bool no_progress = false;
  bool json = false;
  bool by_index = false;
};

// Lines of a text file, trimmed, empty ones skipped; `what` names it in errors.
std::vector<std::string> read_lines(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw ExitError{2, what + " " + printable(path) + ": cannot be read"};
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) throw ExitError{2, what + " " + printable(path) + ": the file is empty"};
  return out;
}

// timm's --class-map (one class name a line: the line number is the model's index) and
// --valid-labels (one model index a line) against the dataset's class names.
EvalLabels eval_labels(const EvalCli& c, const std::vector<std::string>& dataset_labels,
                       int64_t model_classes) {
  EvalLabels l;
  if (!c.class_map.empty()) {
    std::map<std::string, int64_t> index;
    const std::vector<std::string> names = read_lines(c.class_map, "--class-map");
    for (size_t i = 0; i < names.size(); ++i) {
      if (!index.emplace(names[i], static_cast<int64_t>(i)).second) {
        throw ExitError{2, "--class-map " + printable(c.class_map) + ": '" +
                               printable(names[i]) + "' appears twice"};
      }
    }
    if (static_cast<int64_t>(names.size()) > model_classes) {
      throw ExitError{2, "--class-map " + printable(c.class_map) + " names " +
                             std::to_string(names.size()) + " classes, the model has " +
                             std::to_string(model_classes)};
    }
    std::vector<std::string> missing;
    for (const std::string& n : dataset_labels) {
      auto it = index.find(n);
      if (it == index.end()) {
        missing.push_back(printable(n));
      } else {
        l.model_class.push_back(it->second);
      }
    }
    if (!missing.empty()) {
      throw ExitError{2, "--class-map " + printable(c.class_map) +
                             " does not name the dataset's classes: " + join(missing, ", ")};
    }
  }
  if (!c.valid_labels.empty()) {
    for (const std::string& v : read_lines(c.valid_labels, "--valid-labels")) {
      l.valid.push_back(parse_whole(v, "--valid-labels (model class indices)", 0,
                                    model_classes - 1));
    }
    std::vector<int64_t> sorted = l.valid;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      throw ExitError{2, "--valid-labels " + printable(c.valid_labels) + ": an index appears twice"};
    }
    for (size_t i = 0; i < dataset_labels.size(); ++i) {
      const int64_t m = l.model_class.empty() ? static_cast<int64_t>(i) : l.model_class[i];
      if (!std::binary_search(sorted.begin(), sorted.end(), m)) {
        throw ExitError{2, "--valid-labels " + printable(c.valid_labels) + " leaves out class " +
                               std::to_string(m) + " ('" + printable(dataset_labels[i]) +
                               "'), which the dataset holds"};
      }
    }
  }
  return l;
}

void add_eval(CLI::App& root) {
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
                  std::string("How the encodings meet other sizes, comma separated: ") +
                      kPolicyWords + ". Each is evaluated; the trained size once")
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
  cmd->add_option("--class-map", c->class_map,
                  "A file of class names, one a line, in the model's order (line N: class N): "
                  "each dataset class (folder) is the model class of its name, as timm's "
                  "--class-map")
      ->check(CLI::ExistingFile);
  cmd->add_option("--valid-labels", c->valid_labels,
                  "A file of model class indices, one a line: score only over those outputs, as "
                  "timm's --valid-labels")
      ->check(CLI::ExistingFile);
  add_model_options(cmd, *c, /*with_labels=*/false);
  add_threads_option(cmd);
  add_precision_option(cmd, c->precision);
  cmd->callback([c] {
    LoadedModel lm = load_model(c->model, c->load_options());
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
    EvalLabels remap;
    bool have_remap = false;
    {
      // Before anything is printed: every size has the same classes and channels.
      const std::unique_ptr<Dataset> data = make_dataset(data_at(sizes.front()));
      if (data->channels() != cfg.channels) {
        throw ExitError{2, "the model expects " + std::to_string(cfg.channels) +
                               " channels; dataset " + data->name() + " has " +
                               std::to_string(data->channels())};
      }
      std::string note;
      if (!c->class_map.empty() || !c->valid_labels.empty()) {
        remap = eval_labels(*c, data->labels().empty()
                                    ? std::vector<std::string>(static_cast<size_t>(data->classes()))
                                    : data->labels(),
                            cfg.classes);
        if (c->class_map.empty() && data->classes() > cfg.classes) {
          throw ExitError{2, "the dataset has " + std::to_string(data->classes()) +
                                 " classes, the model " + std::to_string(cfg.classes)};
        }
        have_remap = true;
      } else {
        try {
          note = check_model_classes(cfg.labels, cfg.classes, *data, c->by_index,
                                     "--classes-by-index");
        } catch (const std::invalid_argument& e) {
          throw ExitError{2, c->model + " on " + c->data.name + ": " + e.what()};
        }
      }
      if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    if (!c->json) {
      std::printf("%s (%s, encoding %s, %s linears) on %s %s\n", c->model.c_str(), cfg.name.c_str(),
                  cfg.encoding.str().c_str(), c->precision.c_str(), c->data.name.c_str(),
                  c->train_split ? "train" : "test");
      std::printf("%6s  %-11s  %9s  %8s  %7s  %8s  %7s  %s\n", "size", "policy", "top-1", "top-5",
                  "loss", "images", "img/s", "extension rules");
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
        // Appended to, not "@" + std::to_string(s): GCC 12 reports a false overlap there
        // (-Wrestrict) once this file shares a unity build's unit with the other commands.
        std::string where = "@";
        where += std::to_string(s);
        if (!built) where += " " + label;
        EvalResult r = evaluate(model, *data, c->batch, !c->no_progress, where, nullptr, false,
                                have_remap ? &remap : nullptr);
        const double per_s = r.count / std::max(1e-9, r.seconds);
        out["results"].push_back({{"size", s},
                                  {"policy", built ? "trained size" : label},
                                  {"extension_rules", rules},
                                  {"accuracy", r.accuracy},
                                  {"loss", r.loss},
                                  {"images", r.count},
                                  {"img_per_s", per_s},
                                  // timm's validate record (percentages, millions):
                                  {"top1", 100 * r.accuracy},
                                  {"top1_err", 100 - 100 * r.accuracy},
                                  {"top5", 100 * r.top5},
                                  {"top5_err", 100 - 100 * r.top5},
                                  {"param_count", std::round(model.num_params() / 1e4) / 100},
                                  {"img_size", s},
                                  {"crop_pct", cfg.preprocess.crop_pct},
                                  {"interpolation", interpolation_name(cfg.preprocess.interpolation)}});
        if (!c->json) {
          std::printf("%6lld  %-11s  %8.2f%%  %7.2f%%  %7.4f  %8lld  %7.0f  %s\n",
                      static_cast<long long>(s), label.c_str(), 100 * r.accuracy, 100 * r.top5,
                      r.loss, static_cast<long long>(r.count), per_s, rules.c_str());
          std::fflush(stdout);
        }
      }
    }
    if (c->json) std::printf("%s\n", out.dump(2).c_str());
  });
}

VITPE_COMMAND(41, "eval", computes, add_eval);

}  // namespace
}  // namespace vitpe::app
