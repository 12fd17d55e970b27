// `vitpe encodings list`: the positional-encoding kinds, their site, options with defaults and a
// summary. `vitpe encodings show --encoding KIND --grid 14x14 --dim 384 [--heads 6] --out DIR`:
// PNG pictures of an encoding (encodings/pictures.h), learned kinds as initialised.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/command.h"
#include "encodings/encoding.h"
#include "encodings/pictures.h"

namespace vitpe::app {
namespace {

void run_list(bool json) {
  auto kinds = encoding_kinds();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& k : kinds) {
      out.push_back({{"kind", k.name},
                     {"site", site_name(k.site)},
                     {"options", k.options},
                     {"summary", k.summary},
                     {"extension", rule_name(k.extension)},
                     {"extension_note", k.extension_note}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  size_t wn = 4, ws = 4, wo = 7;
  for (const auto& k : kinds) {
    wn = std::max(wn, k.name.size());
    ws = std::max(ws, std::string(site_name(k.site)).size());
    wo = std::max(wo, k.options.size());
  }
  auto row = [&](const std::string& a, const std::string& b, const std::string& c,
                 const std::string& d) {
    std::printf("%-*s  %-*s  %-*s  %s\n", (int)wn, a.c_str(), (int)ws, b.c_str(), (int)wo,
                c.c_str(), d.c_str());
  };
  row("kind", "site", "options", "summary");
  row(std::string(wn, '-'), std::string(ws, '-'), std::string(wo, '-'), std::string(7, '-'));
  for (const auto& k : kinds) row(k.name, site_name(k.site), k.options, k.summary);
  std::printf("\nOn a grid other than the trained one:\n");
  for (const auto& k : kinds) {
    if (k.extension == ExtensionRule::none && k.extension_note.empty()) continue;  // none
    std::printf("  %-*s  %-11s  %s\n", (int)wn, k.name.c_str(), rule_name(k.extension),
                k.extension_note.c_str());
  }
  std::printf(
      "\nSpec syntax: KIND[:NAME=VALUE[,NAME=VALUE]], parts joined by '+' with at most one part "
      "per site,\ne.g. sincos2d:layout=timm, learned1d+relbias, rope-mixed:theta=10+learned1d, "
      "peg+relbias.\n"
      "Prefix (class) tokens: fixed kinds give them zero; learned kinds give them their own "
      "learned entries.\n");
}

Grid parse_grid(const std::string& s) {
  Grid g;
  size_t x = s.find('x');
  try {
    size_t used = 0;
    if (x == std::string::npos) throw std::invalid_argument("no x");
    g.rows = std::stoll(s.substr(0, x), &used);
    if (used != x) throw std::invalid_argument("rows");
    g.cols = std::stoll(s.substr(x + 1), &used);
    if (used != s.size() - x - 1) throw std::invalid_argument("cols");
  } catch (const std::exception&) {
    throw ExitError{2, "--grid expects ROWSxCOLS (e.g. 14x14), got '" + s + "'"};
  }
  if (g.rows < 1 || g.cols < 1 || g.count() > 4096)
    throw ExitError{2, "--grid " + s + ": rows and cols must be >= 1 and rows*cols <= 4096"};
  return g;
}

struct ShowOptions {
  std::string encoding, grid = "14x14", out;
  int64_t dim = 384, heads = 6, prefix = 1;
  uint64_t seed = 0;
};

void run_show(const ShowOptions& s) {
  PictureOptions o;
  o.grid = parse_grid(s.grid);
  o.dim = s.dim;
  o.heads = s.heads;
  o.prefix = s.prefix;
  o.seed = s.seed;
  auto paths = write_encoding_pictures(s.encoding, o, s.out);
  if (paths.empty()) {
    std::printf(
        "%s: no table or attention term to draw (none, or a conditional kind such as "
        "peg, which is computed from the tokens)\n",
        s.encoding.c_str());
    return;
  }
  for (const auto& p : paths) std::printf("%s\n", p.c_str());
}

void add_encodings(CLI::App& root) {
  CLI::App* cmd = find_or_add_subcommand(root, "encodings",
                                         "List positional encodings or draw "
                                         "pictures of one");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "Kinds, their site, options with defaults, summary");
  auto list_json = std::make_shared<bool>(false);
  list->add_flag("--json", *list_json, "Print JSON instead of text");
  list->callback([list_json] { run_list(*list_json); });

  auto s = std::make_shared<ShowOptions>();
  CLI::App* show = cmd->add_subcommand(
      "show", "Write PNGs: values heatmap, similarity map (ViT Fig. 7), attention bias/rotation");
  show->add_option("--encoding", s->encoding, "Encoding spec, e.g. sincos2d or learned1d+relbias")
      ->required();
  show->add_option("--grid", s->grid, "Patch grid ROWSxCOLS")->capture_default_str();
  show->add_option("--dim", s->dim, "Embedding width D")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  show->add_option("--heads", s->heads, "Attention heads (head dim = D / heads)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  show->add_option("--prefix", s->prefix, "Prefix (class) tokens")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  show->add_option("--seed", s->seed, "Seed for learned kinds (drawn as initialised)")
      ->capture_default_str();
  show->add_option("--out", s->out, "Output directory")->required();
  show->callback([s] { run_show(*s); });
}

VITPE_COMMAND(45, "encodings", light, add_encodings);

}  // namespace
}  // namespace vitpe::app
