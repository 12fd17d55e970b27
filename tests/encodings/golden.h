// Reads the goldens written by tests/golden/make_encoding_goldens.py: raw little-endian float32
// files plus tests/data/encodings/goldens.json with their shapes (no dependency on vit/).
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "ops/tensor.h"

namespace vitpe::testing {

inline const nlohmann::json& golden_index() {
  static const nlohmann::json index = [] {
    std::ifstream f(std::string(VITPE_TEST_DATA) + "/encodings/goldens.json");
    if (!f) throw std::runtime_error("missing tests/data/encodings/goldens.json");
    return nlohmann::json::parse(f);
  }();
  return index;
}

inline const nlohmann::json& golden_meta(const std::string& name) {
  return golden_index().at(name).at("meta");
}

inline Tensor golden(const std::string& name) {
  const auto& e = golden_index().at(name);
  std::vector<int64_t> shape = e.at("shape").get<std::vector<int64_t>>();
  Tensor t = Tensor::empty(Shape(shape));
  std::ifstream f(std::string(VITPE_TEST_DATA) + "/encodings/" + e.at("file").get<std::string>(),
                  std::ios::binary);
  f.read(reinterpret_cast<char*>(t.f32()), static_cast<std::streamsize>(t.nbytes()));
  if (!f || f.gcount() != static_cast<std::streamsize>(t.nbytes()))
    throw std::runtime_error("golden " + name + ": short read");
  return t;
}

}  // namespace vitpe::testing
