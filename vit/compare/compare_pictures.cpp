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

std::vector<Picture> encoding_pictures(const ModelConfig& c, Model* trained,
                                       const std::string& dir) {
  const EncodingSpec spec = parse_encoding(c.encoding);
  const fs::path out = fs::path(dir) / spec.str();
  const bool vit = c.kind == ModelKind::vit;
  const int64_t prefix = vit ? c.prefix_tokens() : 0;
  const int64_t token_prefix = c.no_embed_class ? 0 : prefix;  // the token table's prefix rows
  const int64_t heads = vit ? c.heads : c.stage_heads.at(0);
  const int64_t head_dim = c.dim / heads;
  const Grid grid = c.patch_grid();
  const Grid window =
      vit ? grid : Grid{std::min(c.window, grid.rows), std::min(c.window, grid.cols)};
  Rng rng(0);
  std::vector<std::string> paths;
  if (auto tok = make_token_encoding(spec, c.dim, grid, token_prefix, rng)) {
    copy_trained(tok->params(), trained, {""});
    for (auto& p : write_token_pictures(*tok, grid, out.string(), c.encoding)) paths.push_back(p);
  }
  if (auto att = make_attention_encoding(spec, heads, head_dim, window, vit ? prefix : 0, rng)) {
    copy_trained(att->params(), trained, {"blocks.0.", "layers.0.blocks.0."});
    AttnGeometry geom{window, vit ? prefix : 0};
    for (auto& p : write_attention_pictures(*att, heads, head_dim, geom, out.string(),
                                            c.encoding + " (block 0)")) {
      paths.push_back(p);
    }
  }
  return read_pictures(paths);
}

}  // namespace vitpe
