// Finding the data folder (vit/io/data_files.h). The relative paths and folders are compiled in
// by CMake (CMakeLists.txt, "the data folder").
#include "vit/io/data_files.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace vitpe {
namespace {

namespace fs = std::filesystem;

// The file this code was loaded from: libvitpe.so, or the executable it is linked into.
fs::path own_binary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_binary), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  fs::path p = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path(info.dli_fname) : p;
}

void add_unique(std::vector<std::string>& dirs, const fs::path& dir) {
  const std::string s = dir.lexically_normal().string();
  for (const std::string& d : dirs) {
    if (d == s) return;
  }
  dirs.push_back(s);
}

}  // namespace

std::vector<std::string> data_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("VITPE_DATA_DIR"); env != nullptr && *env != '\0') {
    add_unique(dirs, env);
    return dirs;
  }
  const fs::path self = own_binary();
  if (!self.empty()) {
    const fs::path dir = self.parent_path();
    const bool is_library = self.filename().string().rfind("libvitpe.so", 0) == 0;
    add_unique(dirs, dir / (is_library ? VITPE_LIB_TO_DATA : VITPE_BIN_TO_DATA));
  }
  add_unique(dirs, VITPE_BUILD_DATA_DIR);
  add_unique(dirs, VITPE_INSTALL_DATA_DIR);
  return dirs;
}

std::string data_file(const std::string& relative) {
  const fs::path rel(relative);
  if (relative.empty() || rel.is_absolute()) {
    throw std::runtime_error("data file: expected a path relative to the data folder, found '" +
                             relative + "'");
  }
  for (const fs::path& part : rel) {
    if (part == "..") {
      throw std::runtime_error("data file: '" + relative + "' leaves the data folder ('..')");
    }
  }
  const std::vector<std::string> dirs = data_dirs();
  std::string searched;
  for (const std::string& d : dirs) {
    const fs::path p = fs::path(d) / rel;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
    searched += (searched.empty() ? "" : ", ") + d;
  }
  throw std::runtime_error("data file '" + relative + "' not found; searched " + searched +
                           " (set VITPE_DATA_DIR to the folder that holds it: share/vitpe of "
                           "the prefix vitpe is installed in)");
}

std::string bundled_model() { return data_file("models/vit-fmnist.safetensors"); }

}  // namespace vitpe
