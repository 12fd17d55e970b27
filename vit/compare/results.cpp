// The columns of a comparison's results (see results.h).
#include "vit/compare/results.h"

namespace vitpe {

std::string column_policy(const CompareResults& r, size_t k) {
  return k < r.policies.size() && !r.policies[k].empty() ? r.policies[k] : "native";
}

bool compares_policies(const CompareResults& r) {
  for (size_t k = 0; k < r.sizes.size(); ++k)
    if (column_policy(r, k) != "native") return true;
  return false;
}

std::string column_protocol(const CompareResults& r, size_t k) {
  return k < r.protocols.size() ? r.protocols[k] : "";
}

bool compares_protocols(const CompareResults& r) {
  for (size_t k = 0; k < r.sizes.size(); ++k)
    if (!column_protocol(r, k).empty()) return true;
  return false;
}

int64_t column_cols(const CompareResults& r, size_t k) {
  return k < r.cols.size() && r.cols[k] > 0 ? r.cols[k] : r.sizes[k];
}

std::string size_label(const CompareResults& r, size_t k) {
  const int64_t c = column_cols(r, k);
  std::string s = std::to_string(r.sizes[k]);
  if (c != r.sizes[k]) {
    s += 'x';
    s += std::to_string(c);
  }
  return s;
}

bool is_train_column(const CompareResults& r, size_t k) {
  return r.sizes[k] == r.train_size && column_cols(r, k) == r.train_size;
}

std::string column_label(const CompareResults& r, size_t k) {
  std::string s = size_label(r, k);
  if (is_train_column(r, k)) return s;
  if (compares_protocols(r) && !column_protocol(r, k).empty()) {
    s += ' ';
    s += column_protocol(r, k);
  }
  if (!compares_policies(r)) return s;
  const std::string p = column_policy(r, k);
  s += ' ';
  s += p == "interpolate"   ? std::string("interp")
       : p == "extrapolate"  ? std::string("extrap")
       : p == kPatchResize   ? std::string("patch")
                             : p;
  return s;
}

}  // namespace vitpe
