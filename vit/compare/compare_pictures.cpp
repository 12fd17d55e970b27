// Encoding pictures for the report: the encoding parts are rebuilt for the model's geometry,
// take the trained values from the model's parameters (matched by checkpoint name), and are
// drawn by encodings/pictures.h.
#include "vit/compare/compare_pictures.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "encodings/pictures.h"

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
    p.png.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (!p.png.empty()) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::vector<Picture> encoding_pictures(const ModelConfig& c, Model* trained, const std::string& dir,
                                       const std::vector<int64_t>& other_sizes) {
  const EncodingSpec spec = parse_encoding(c.encoding);
  const fs::path out = fs::path(dir) / spec.str();
  const bool vit = c.kind == ModelKind::vit;
  const int64_t prefix = vit ? c.prefix_tokens() : 0;
  const int64_t token_prefix = c.no_embed_class ? 0 : prefix;  // the token table's prefix rows
  const int64_t heads = vit ? c.heads : c.stage_heads.at(0);
  const int64_t head_dim = c.dim / heads;
  const Grid grid = c.patch_grid();
  auto window_of = [&](Grid g) {
    return vit ? g : Grid{std::min(c.window, g.rows), std::min(c.window, g.cols)};
  };
  const Grid window = window_of(grid);
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
  if (auto tok = make_token_encoding(spec, c.dim, grid, token_prefix, rng)) {
    copy_trained(tok->params(), trained, {""});
    add(write_token_pictures(*tok, grid, out.string(), c.encoding), "", "");
    if (tok->extension() != Extension::none) {
      for (const Other& o : others) {
        tok->set_extension_policy(o.policy);
        add(write_token_pictures(*tok, o.grid, (out / o.folder).string(),
                                 c.encoding + " at " + o.label),
            o.label, "_similarity");
      }
    }
  }
  // Every block's attention part (its own learned values), then block 0's at the other grids.
  const int64_t blocks = vit ? c.depth : c.depths.at(0);
  for (int64_t b = 0; b < blocks; ++b) {
    auto att = make_attention_encoding(spec, heads, head_dim, window, vit ? prefix : 0, rng);
    if (!att) break;
    const std::string name = std::to_string(b);
    copy_trained(att->params(), trained, {"blocks." + name + ".", "layers.0.blocks." + name + "."});
    if (b > 0 && att->params().empty()) break;  // fixed kinds: every block is the same
    const AttnGeometry geom{window, vit ? prefix : 0};
    add(write_attention_pictures(*att, heads, head_dim, geom, (out / ("block" + name)).string(),
                                 c.encoding + " (block " + name + ")"),
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
                              c.encoding + " (block " + name + "): phase"),
          "block " + name, "");
    }
    if (b > 0 || att->extension() == Extension::none) continue;
    for (const Other& o : others) {
      const Grid w = window_of(o.grid);
      if (w == window) continue;  // Swin: the window does not grow with the image
      att->set_extension_policy(o.policy);
      add(write_attention_pictures(*att, heads, head_dim, AttnGeometry{w, vit ? prefix : 0},
                                   (out / o.folder).string(),
                                   c.encoding + " (block 0) at " + o.label),
          "block 0 at " + o.label, "");
    }
  }
  return pics;
}

}  // namespace vitpe
