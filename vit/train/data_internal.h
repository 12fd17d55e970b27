// Internal helpers shared by the dataset implementations (not installed API).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "vit/train/data.h"

namespace vitpe {

inline void check_index(const Dataset& d, int64_t i) {
  if (i < 0 || i >= d.size()) {
    throw std::out_of_range(d.name() + ": sample index " + std::to_string(i) +
                            " out of range [0, " + std::to_string(d.size()) + ")");
  }
}

std::unique_ptr<Dataset> make_fashion_mnist(const DatasetOptions& o);
std::unique_ptr<Dataset> make_procedural(const DatasetOptions& o);
std::unique_ptr<Dataset> make_quadrant(const DatasetOptions& o);
std::unique_ptr<Dataset> make_folder(const DatasetOptions& o);

}  // namespace vitpe
