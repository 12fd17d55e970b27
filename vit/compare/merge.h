// One comparison from several: a study split into resumable invocations (by kind or by regime)
// is merged back into one CompareResults, the same kind from two files kept apart as KIND@TAG.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "vit/compare/results.h"

namespace vitpe {

// Renames every encoding of r to "KIND@TAG": its runs, pictures, reference and declared primary
// contrasts.
void tag_encodings(CompareResults& r, const std::string& tag);

// Adds b's runs, encodings, seeds, pictures, primary contrasts and time to a; settings and
// versions that differ keep every file's value, labelled with its label. Throws
// std::runtime_error naming b_path when the evaluation columns differ (sizes, policies,
// protocols, training size) or a run (encoding, seed) is in both.
void merge_results(CompareResults& a, const CompareResults& b, const std::string& a_label,
                   const std::string& b_label, const std::string& b_path);

}  // namespace vitpe
