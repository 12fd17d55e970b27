// The Swin family's architecture struct: its JSON fields, validation, the description of a config
// without a label, `vitpe info`'s lines and where its attention encodings work.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "ops/util.h"
#include "vit/models/swin/swin_family.h"

namespace vitpe::swin_family {

ModelConfig blank() {
  ModelConfig c;
  c.family = "swin";
  c.arch = SwinArch{};
  c.encoding = "relbias";
  return c;
}

void arch_to_json(const ModelConfig& c, nlohmann::json& j) {
  const SwinArch& a = c.swin();
  j["dim"] = a.dim;
  j["depths"] = a.depths;
  j["stage_heads"] = a.stage_heads;
  j["window"] = a.window;
  j["mlp_ratio"] = a.mlp_ratio;
  j["swin_v2"] = a.v2;
  j["eps"] = a.eps;
}

void arch_from_json(const nlohmann::json& j, ModelConfig& c) {
  SwinArch& a = c.swin();
  a.dim = json_integer(j, "dim");
  a.depths = json_integers(j, "depths");
  a.stage_heads = json_integers(j, "stage_heads");
  a.window = json_integer(j, "window");
  a.eps = static_cast<float>(json_number(j, "eps"));
  // Fields added since the first files (V1: no swin_v2), and "pool", which files before the
  // families wrote for Swin too ("avg", the only pooling Swin has), ignored.
  a.mlp_ratio = static_cast<float>(json_number(j, "mlp_ratio", 4.0));
  a.v2 = json_bool(j, "swin_v2", false);
}

void validate(const ModelConfig& c, const std::function<void(const std::string&)>& fail) {
  const SwinArch& a = c.swin();
  check_range(fail, "dim", a.dim, 1, 1 << 16);
  if (!(a.eps > 0 && a.eps < 1)) fail("eps must be in (0, 1), found " + std::to_string(a.eps));
  if (!(a.mlp_ratio > 0 && a.mlp_ratio <= 64)) {
    fail("mlp_ratio must be in (0, 64], found " + std::to_string(a.mlp_ratio));
  }
  if (a.depths.empty() || a.depths.size() != a.stage_heads.size() || a.depths.size() > 8) {
    fail("depths and stage_heads need one entry per stage (1 to 8 stages), found " +
         std::to_string(a.depths.size()) + " and " + std::to_string(a.stage_heads.size()));
  }
  // A window larger than the patch grid is clamped to it, so a larger one is a mistake.
  check_range(fail, "window", a.window, 1, std::max(c.img_rows, c.img_cols) / c.patch);
  for (size_t s = 0; s < a.depths.size(); ++s) {
    check_range(fail, "depths[stage]", a.depths[s], 1, 1024);
    const int64_t d = a.dim << s;
    if (a.stage_heads[s] <= 0 || d % a.stage_heads[s]) {
      fail("stage " + std::to_string(s) + ": dim " + std::to_string(d) +
           " is not divisible by heads " + std::to_string(a.stage_heads[s]));
    }
  }
}

std::string describe(const ModelConfig& c) { return c.swin().v2 ? "Swin V2" : "Swin"; }

namespace {
std::string joined(const std::vector<int64_t>& v) {
  std::vector<std::string> parts;
  for (int64_t x : v) parts.push_back(std::to_string(x));
  return join(parts, ",");
}
}  // namespace

std::vector<std::pair<std::string, std::string>> info(const ModelConfig& c) {
  const SwinArch& a = c.swin();
  return {{"embed dim", std::to_string(a.dim) + ", depths " + joined(a.depths) + ", heads " +
                            joined(a.stage_heads) + ", window " + std::to_string(a.window)},
          {"blocks", a.v2 ? "post-norm, scaled cosine attention (V2)" : "pre-norm (V1)"}};
}

Grid stage_window(const SwinArch& a, Grid res) {
  return {std::min(a.window, res.rows), std::min(a.window, res.cols)};
}

Grid merged_grid(Grid res) { return {(res.rows + 1) / 2, (res.cols + 1) / 2}; }

std::vector<AttentionSite> attention_sites(const ModelConfig& c) {
  const SwinArch& a = c.swin();
  std::vector<AttentionSite> out;
  Grid res = c.patch_grid();
  for (size_t s = 0; s < a.depths.size(); ++s) {
    if (s > 0) res = merged_grid(res);
    const int64_t dim = a.dim << s, heads = a.stage_heads[s];
    for (int64_t j = 0; j < a.depths[s]; ++j) {
      out.push_back({heads, dim / heads, AttnGeometry{stage_window(a, res), 0},
                     "layers." + std::to_string(s) + ".blocks." + std::to_string(j) + "."});
    }
  }
  return out;
}

}  // namespace vitpe::swin_family
