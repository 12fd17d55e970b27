// The factory: parses spec strings ("sincos2d", "learned1d+relbias",
// "sincos2d:T=100,layout=timm", "rope-mixed:theta=10+learned1d"), validates kinds and options,
// and builds the parts. Grammar: parts joined by '+'; a part is KIND or
// KIND:NAME=VALUE[,NAME=VALUE]. At most one part per site (token, attention, conditional); `none`
// stands alone.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "encodings/encoding.h"
#include "encodings/kinds.h"
#include "ops/util.h"

namespace vitpe {

namespace {

using enc::KindDef;
using enc::Site;

const std::vector<KindDef>& registry() {
  static const std::vector<KindDef> kinds = {
      enc::none_kind(),        enc::learned1d_kind(),  enc::sincos1d_kind(),
      enc::separable2d_kind(), enc::sincos2d_kind(),   enc::relbias_kind(),
      enc::rope_axial_kind(),  enc::rope_mixed_kind(), enc::rope_dinov3_kind(),
      enc::alibi2d_kind(),     enc::cpb_kind(),        enc::peg_kind()};
  return kinds;
}

std::string known_kinds() {
  std::string s;
  for (const auto& k : registry()) s += (s.empty() ? "" : ", ") + k.name;
  return s;
}

// "token: learned1d, sincos1d, ...; attention: relbias, ...; conditional: peg" from the registry.
std::string kinds_by_site() {
  std::map<Site, std::string> lists;
  for (const auto& k : registry()) {
    std::string& list = lists[k.site];
    if (k.site != Site::none) list += (list.empty() ? "" : ", ") + k.name;
  }
  return "token: " + lists[Site::token] + "; attention: " + lists[Site::attention] +
         "; conditional: " + lists[Site::conditional];
}

std::string accepted_options(const KindDef& k) {
  if (k.options.empty()) return "none (this kind takes no options)";
  std::string s;
  for (const auto& o : k.options) {
    if (!s.empty()) s += ", ";
    s += o.name + "=";
    if (o.grid) {
      s += "<RxC|N|none>";
    } else if (o.count) {
      s += "<whole number >= 0>";
    } else if (o.choices.empty()) {
      s += o.or_none ? "<number > 0|none>" : o.or_grid ? "<number > 0|grid>" : "<number > 0>";
    } else {
      for (size_t i = 0; i < o.choices.size(); ++i) s += (i ? "|" : "") + o.choices[i];
    }
    s += " (default " + o.default_value + ")";
  }
  return s;
}

// The pieces of s between separators, each trimmed.
std::vector<std::string> split_trimmed(const std::string& s, char sep) {
  std::vector<std::string> out = split(s, sep);
  for (std::string& piece : out) piece = trim(piece);
  return out;
}

const KindDef& find_kind(const std::string& name, const std::string& spec) {
  for (const auto& k : registry())
    if (k.name == name) return k;
  throw std::invalid_argument("unknown positional encoding '" + name + "' in '" + spec +
                              "'; known kinds: " + known_kinds() +
                              " (combine kinds of different sites with '+')");
}

// Validates one option value; throws naming the kind, the option and what is accepted.
void check_value(const KindDef& k, const enc::OptionDef& o, const std::string& value) {
  const std::string where = k.name + ": option " + o.name + "=" + value;
  if (o.grid) {
    if (!enc::parse_grid_value(value))
      throw std::invalid_argument(where +
                                  " is not a grid (RxC, N for NxN, or none; sides 1..4096)" +
                                  "; accepted: " + accepted_options(k));
    return;
  }
  if (o.count) {
    const bool digits =
        !value.empty() && value.size() <= 6 &&
        std::all_of(value.begin(), value.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!digits)
      throw std::invalid_argument(where +
                                  " is not a whole number >= 0; accepted: " + accepted_options(k));
    return;
  }
  if (!o.choices.empty()) {
    if (std::find(o.choices.begin(), o.choices.end(), value) == o.choices.end())
      throw std::invalid_argument(where + " is not accepted; accepted: " + accepted_options(k));
    return;
  }
  if (o.or_none && value == "none") return;
  if (o.or_grid && value == "grid") return;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || !(v > 0) || v > 1e30)
    throw std::invalid_argument(where +
                                " is not a positive number; accepted: " + accepted_options(k));
}

// Options of a part with the defaults filled in (validated).
enc::Options options_of(const KindDef& k, const EncodingSpec::Part& part) {
  std::map<std::string, std::string> values;
  for (const auto& o : k.options) values[o.name] = o.default_value;
  std::map<std::string, bool> seen;
  for (const auto& [name, value] : part.options) {
    auto it = std::find_if(k.options.begin(), k.options.end(),
                           [&name = name](const enc::OptionDef& o) { return o.name == name; });
    if (it == k.options.end())
      throw std::invalid_argument(k.name + ": unknown option '" + name +
                                  "'; accepted: " + accepted_options(k));
    if (seen[name]) throw std::invalid_argument(k.name + ": option '" + name + "' given twice");
    seen[name] = true;
    check_value(k, *it, value);
    values[name] = value;
  }
  return enc::Options(k.name, std::move(values));
}

// The part of `spec` at `site` (nullptr if none); validates the whole spec on the way.
const EncodingSpec::Part* part_at(const EncodingSpec& spec, Site site, const KindDef** kind) {
  const EncodingSpec::Part* found = nullptr;
  for (const auto& p : spec.parts) {
    const KindDef& k = find_kind(p.kind, spec.str());
    options_of(k, p);
    if (k.site == site) {
      if (found)
        throw std::invalid_argument("encoding '" + spec.str() + "' has two " + site_name(site) +
                                    "-site parts ('" + found->kind + "' and '" + p.kind +
                                    "'); at most one part per site");
      found = &p;
      *kind = &k;
    }
  }
  return found;
}

}  // namespace

const char* site_name(EncodingSite s) {
  switch (s) {
    case Site::token:
      return "token";
    case Site::attention:
      return "attention";
    case Site::conditional:
      return "conditional";
    default:
      return "-";
  }
}

EncodingSpec::EncodingSpec(const std::string& text) : EncodingSpec(parse_encoding(text)) {}
EncodingSpec::EncodingSpec(const char* text) : EncodingSpec(parse_encoding(text)) {}

const EncodingSpec::Part* EncodingSpec::part(const std::string& kind) const {
  for (const Part& p : parts) {
    if (p.kind == kind) return &p;
  }
  return nullptr;
}

const EncodingSpec::Part* EncodingSpec::part(EncodingSite site) const {
  for (const Part& p : parts) {
    if (find_kind(p.kind, str()).site == site) return &p;
  }
  return nullptr;
}

std::string EncodingSpec::str() const {
  std::string s;
  for (const auto& p : parts) {
    if (!s.empty()) s += "+";
    s += p.kind;
    for (size_t i = 0; i < p.options.size(); ++i)
      s += (i ? "," : ":") + p.options[i].first + "=" + p.options[i].second;
  }
  return s;
}

EncodingSpec parse_encoding(const std::string& text) {
  const std::string spec = trim(text);
  if (spec.empty())
    throw std::invalid_argument("empty positional encoding spec; known kinds: " + known_kinds());
  EncodingSpec out;
  std::map<Site, std::string> sites;
  for (const std::string& part_text : split_trimmed(spec, '+')) {
    if (part_text.empty())
      throw std::invalid_argument("empty part in encoding '" + spec +
                                  "' (parts are joined by a single '+')");
    EncodingSpec::Part part;
    size_t colon = part_text.find(':');
    part.kind = trim(part_text.substr(0, colon));
    const KindDef& k = find_kind(part.kind, spec);
    if (colon != std::string::npos) {
      for (const std::string& kv : split_trimmed(part_text.substr(colon + 1), ',')) {
        size_t eq = kv.find('=');
        if (eq == std::string::npos || trim(kv.substr(0, eq)).empty())
          throw std::invalid_argument(k.name + ": option '" + kv +
                                      "' is not NAME=VALUE; accepted: " + accepted_options(k));
        part.options.emplace_back(trim(kv.substr(0, eq)), trim(kv.substr(eq + 1)));
      }
    }
    options_of(k, part);  // validates names and values
    if (k.site == Site::none && spec != part_text)
      throw std::invalid_argument("'" + k.name + "' cannot be combined with other kinds (in '" +
                                  spec + "')");
    if (k.site != Site::none) {
      auto [it, fresh] = sites.emplace(k.site, k.name);
      if (!fresh)
        throw std::invalid_argument("encoding '" + spec + "' has two " + site_name(k.site) +
                                    "-site parts ('" + it->second + "' and '" + k.name +
                                    "'); at most one part per site (" + kinds_by_site() + ")");
    }
    out.parts.push_back(std::move(part));
  }
  return out;
}

std::unique_ptr<TokenEncoding> make_token_encoding(const EncodingSpec& spec, int64_t dim, Grid grid,
                                                   int64_t prefix, Rng& rng) {
  const KindDef* k = nullptr;
  const EncodingSpec::Part* p = part_at(spec, Site::token, &k);
  if (!p) return nullptr;
  return k->make_token(options_of(*k, *p), dim, grid, prefix, rng);
}

std::unique_ptr<AttentionEncoding> make_attention_encoding(const EncodingSpec& spec, int64_t heads,
                                                           int64_t head_dim, Grid window,
                                                           int64_t prefix, Rng& rng) {
  const KindDef* k = nullptr;
  const EncodingSpec::Part* p = part_at(spec, Site::attention, &k);
  if (!p) return nullptr;
  return k->make_attention(options_of(*k, *p), heads, head_dim, window, prefix, rng);
}

std::unique_ptr<ConditionalEncoding> make_conditional_encoding(const EncodingSpec& spec,
                                                               int64_t dim, Grid grid,
                                                               int64_t prefix, Rng& rng) {
  const KindDef* k = nullptr;
  const EncodingSpec::Part* p = part_at(spec, Site::conditional, &k);
  if (!p) return nullptr;
  return k->make_conditional(options_of(*k, *p), dim, grid, prefix, rng);
}

std::vector<EncodingKindInfo> encoding_kinds() {
  std::vector<EncodingKindInfo> out;
  for (const auto& k : registry()) {
    std::string opts;
    for (const auto& o : k.options) {
      if (!opts.empty()) opts += ", ";
      opts += o.name + "=" + o.default_value;
      if (!o.choices.empty()) {
        opts += " (";
        for (size_t i = 0; i < o.choices.size(); ++i) opts += (i ? "|" : "") + o.choices[i];
        opts += ")";
      }
    }
    out.push_back({k.name, k.site, opts.empty() ? "-" : opts, k.summary, k.extension,
                   k.extension_note, k.studied_global, k.studied_windowed});
  }
  return out;
}

std::vector<std::string> default_study_encodings(AttentionLayout layout) {
  std::vector<std::string> out;
  for (const auto& k : registry()) {
    if (layout == AttentionLayout::global ? k.studied_global : k.studied_windowed) {
      out.push_back(k.name);
    }
  }
  return out;
}

const char* rule_name(ExtensionRule e) {
  switch (e) {
    case ExtensionRule::interpolate:
      return "interpolate";
    case ExtensionRule::extrapolate:
      return "extrapolate";
    case ExtensionRule::centre:
      return "centre";
    case ExtensionRule::ntk:
      return "ntk";
    default:
      return "none";
  }
}

const char* policy_name(ExtensionPolicy p) {
  switch (p) {
    case ExtensionPolicy::interpolate:
      return "interpolate";
    case ExtensionPolicy::extrapolate:
      return "extrapolate";
    case ExtensionPolicy::centre:
      return "centre";
    case ExtensionPolicy::ntk:
      return "ntk";
    default:
      return "native";
  }
}

ExtensionPolicy parse_policy(const std::string& word) {
  if (word == "native") return ExtensionPolicy::native;
  if (word == "interpolate" || word == "interp") return ExtensionPolicy::interpolate;
  if (word == "extrapolate" || word == "extrap") return ExtensionPolicy::extrapolate;
  if (word == "centre" || word == "center") return ExtensionPolicy::centre;
  if (word == "ntk") return ExtensionPolicy::ntk;
  throw std::invalid_argument("unknown extension policy '" + word +
                              "': expected native, interpolate, extrapolate, centre or ntk");
}

ExtensionRule resolve_rule(ExtensionPolicy p, ExtensionRule native, RuleAbilities can) {
  if (native == ExtensionRule::none) return native;
  switch (p) {
    case ExtensionPolicy::interpolate:
      return ExtensionRule::interpolate;
    case ExtensionPolicy::extrapolate:
      return ExtensionRule::extrapolate;
    case ExtensionPolicy::centre:
      return can.absolute ? ExtensionRule::centre : ExtensionRule::extrapolate;
    case ExtensionPolicy::ntk:
      return can.frequencies ? ExtensionRule::ntk : native;
    default:
      return native;
  }
}

double ntk_scale(int64_t k, int64_t n, double s) {
  if (n <= 1 || s == 1.0) return 1.0;
  return std::pow(s, -static_cast<double>(k) / static_cast<double>(n - 1));
}

}  // namespace vitpe
