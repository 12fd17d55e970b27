// Merging several comparisons into one (see merge.h).
#include "vit/compare/merge.h"

#include <algorithm>
#include <stdexcept>

#include "vit/compare/stats.h"

namespace vitpe {

void merge_results(CompareResults& a, const CompareResults& b, const std::string& a_label,
                   const std::string& b_label, const std::string& b_path) {
  auto differ = [&](const char* what) {
    return std::runtime_error(b_path + " has other " + what +
                              " than the first results.json; only comparisons with the same "
                              "evaluation columns (sizes, policies, protocols, training size) "
                              "merge");
  };
  if (b.sizes != a.sizes || b.cols != a.cols) throw differ("sizes");
  if (b.policies != a.policies) throw differ("policies");
  if (b.protocols != a.protocols) throw differ("protocols");
  if (b.train_size != a.train_size) throw differ("training size");
  for (const RunResult& run : b.runs) {
    for (const RunResult& have : a.runs)
      if (have.encoding == run.encoding && have.seed == run.seed)
        throw std::runtime_error("run " + run.encoding + " seed " + std::to_string(run.seed) +
                                 " is in " + b_path +
                                 " and in an earlier results.json: --tag names each file's runs "
                                 "apart (KIND@TAG)");
    a.runs.push_back(run);
  }
  for (const std::string& e : b.encodings)
    if (std::find(a.encodings.begin(), a.encodings.end(), e) == a.encodings.end())
      a.encodings.push_back(e);
  for (uint64_t s : b.seeds)
    if (std::find(a.seeds.begin(), a.seeds.end(), s) == a.seeds.end()) a.seeds.push_back(s);
  for (const auto& p : b.pictures) a.pictures.push_back(p);
  for (const std::string& c : b.primary)
    if (std::find(a.primary.begin(), a.primary.end(), c) == a.primary.end()) a.primary.push_back(c);
  a.wall_seconds += b.wall_seconds;
  auto merge_pairs = [&](std::vector<std::pair<std::string, std::string>>& to,
                         const std::vector<std::pair<std::string, std::string>>& from) {
    for (const auto& [k, v] : from) {
      auto it = std::find_if(to.begin(), to.end(), [&](const auto& e) { return e.first == k; });
      if (it == to.end()) {
        to.emplace_back(k, b_label + ": " + v);
      } else if (it->second != v && it->second.find(b_label + ": ") == std::string::npos) {
        if (it->second.find(a_label + ": ") != 0) it->second = a_label + ": " + it->second;
        it->second += "; " + b_label + ": " + v;
      }
    }
  };
  merge_pairs(a.settings, b.settings);
  merge_pairs(a.versions, b.versions);
}

void tag_encodings(CompareResults& r, const std::string& tag) {
  auto name = [&](const std::string& e) { return e + "@" + tag; };
  for (std::string& c : r.primary) {
    const PrimarySpec p = parse_primary(r, c);
    c = name(p.a) + " vs " + name(p.b) + " @ " + column_label(r, p.column);
  }
  for (std::string& e : r.encodings) e = name(e);
  for (RunResult& run : r.runs) run.encoding = name(run.encoding);
  for (auto& p : r.pictures) p.first = name(p.first);
  if (!r.reference.empty()) r.reference = name(r.reference);
}

}  // namespace vitpe
