// Encoding pictures for the report: the encoding parts are rebuilt for the model's geometry,
// take the trained values from the model's parameters (matched by checkpoint name), and are
// drawn by encodings/pictures.h.
#include "vit/compare/compare_pictures.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "encodings/pictures.h"
#include "vit/models/family.h"

namespace vitpe {

namespace fs = std::filesystem;

namespace {

// Copies into the part's parameters the model parameters named prefix + name (same shape).
void copy_trained(const std::vector<Param*>& part, Model* model,
                  const std::vector<std::string>& prefixes) {
  if (!model) return;
  std::vector<Param*> all = model->params();
  for (Param* p : part) {
    for (const std::string& pre : prefixes) {
      for (Param* m : all) {
        if (m->name == pre + p->name && m->value.shape() == p->value.shape()) {
          p->value.copy_from(m->value);
          goto next;
        }
      }
    }
  next:;
  }
}

std::vector<Picture> read_pictures(const std::vector<std::string>& paths) {
  std::vector<Picture> out;
  for (const std::string& path : paths) {
    std::ifstream f(path, std::ios::binary);
    Picture p;
    p.caption = fs::path(path).stem().string();
    p.file = path;
    p.png.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (!p.png.empty()) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::vector<Picture> encoding_pictures(const ModelConfig& c, Model* trained, const std::string& dir,
                                       const std::vector<int64_t>& other_sizes) {
  const EncodingSpec& spec = c.encoding;
  const std::string text = spec.str();
  const fs::path out = fs::path(dir) / text;
  const FamilyDef& family = family_of(c);
  const int64_t token_prefix = family.token_prefix(c);  // the token table's prefix rows
  // The blocks drawn: the first site's and those like it (a Swin's first stage; later stages
  // work at other widths and grids).
  std::vector<AttentionSite> sites = family.attention_sites(c);
  for (size_t i = 1; i < sites.size(); ++i) {
    if (sites[i].heads != sites[0].heads || sites[i].head_dim != sites[0].head_dim ||
        sites[i].geom.window != sites[0].geom.window) {
      sites.resize(i);
      break;
    }
  }
  const int64_t heads = sites.at(0).heads, head_dim = sites.at(0).head_dim;
  const int64_t prefix = sites.at(0).geom.prefix;
  const Grid grid = c.patch_grid();
  // The first block's window on another grid (the whole grid for global attention).
  auto window_of = [&](Grid g) {
    ModelConfig at = c;
    at.img_rows = g.rows * c.patch;
    at.img_cols = g.cols * c.patch;
    return family.attention_sites(at).at(0).geom.window;
  };
  const Grid window = sites.at(0).geom.window;
  // The other grids, as (grid, policy, caption prefix, folder).
  struct Other {
    Grid grid;
    ExtensionPolicy policy;
    std::string label, folder;
  };
  std::vector<Other> others;
  for (int64_t s : other_sizes) {
    const Grid g{s / c.patch, s / c.patch};
    if (s % c.patch != 0 || g == grid) continue;
    for (ExtensionPolicy p : {ExtensionPolicy::interpolate, ExtensionPolicy::extrapolate}) {
      others.push_back({g, p, std::to_string(s) + " px (" + g.str() + "), " + policy_name(p),
                        std::to_string(s) + "-" + policy_name(p)});
    }
  }
  Rng rng(0);
  std::vector<Picture> pics;
  auto add = [&](const std::vector<std::string>& paths, const std::string& label,
                 const std::string& only) {
    for (Picture& p : read_pictures(paths)) {
      if (!only.empty() && p.caption.find(only) == std::string::npos) continue;
      if (!label.empty()) p.caption = label + ": " + p.caption;
      pics.push_back(std::move(p));
    }
  };
  if (auto tok = make_token_encoding(spec, c.embed_dim(), grid, token_prefix, rng)) {
    copy_trained(tok->params(), trained, {""});
    add(write_token_pictures(*tok, grid, out.string(), text), "", "");
    if (tok->extension_rule() != ExtensionRule::none) {
      for (const Other& o : others) {
        tok->set_extension_policy(o.policy);
        add(write_token_pictures(*tok, o.grid, (out / o.folder).string(), text + " at " + o.label),
            o.label, "_similarity");
      }
    }
  }
  // Every block's attention part (its own learned values), then block 0's at the other grids.
  for (size_t b = 0; b < sites.size(); ++b) {
    auto att = make_attention_encoding(spec, heads, head_dim, window, prefix, rng);
    if (!att) break;
    const std::string name = std::to_string(b);
    copy_trained(att->params(), trained, {sites[b].params_prefix});
    if (b > 0 && att->params().empty()) break;  // fixed kinds: every block is the same
    const AttnGeometry geom{window, prefix};
    add(write_attention_pictures(*att, heads, head_dim, geom, (out / ("block" + name)).string(),
                                 text + " (block " + name + ")"),
        "block " + name, "");
    if (att->has_rotation()) {
      // The phase of every frequency, marked with how far each other size's offsets reach.
      std::vector<PhaseReach> reaches;
      for (const Other& o : others) {
        const Grid w = window_of(o.grid);
        if (w == window) continue;
        att->set_extension_policy(o.policy);
        reaches.push_back(phase_reach(*att, geom, AttnGeometry{w, geom.prefix}, o.label));
      }
      att->set_extension_policy(ExtensionPolicy::native);
      add(write_phase_picture(*att, heads, geom, reaches, (out / ("block" + name)).string(),
                              text + " (block " + name + "): phase"),
          "block " + name, "");
    }
    if (b > 0 || att->extension_rule() == ExtensionRule::none) continue;
    for (const Other& o : others) {
      const Grid w = window_of(o.grid);
      if (w == window) continue;  // Swin: the window does not grow with the image
      att->set_extension_policy(o.policy);
      add(write_attention_pictures(*att, heads, head_dim, AttnGeometry{w, prefix},
                                   (out / o.folder).string(), text + " (block 0) at " + o.label),
          "block 0 at " + o.label, "");
    }
  }
  return pics;
}

}  // namespace vitpe
