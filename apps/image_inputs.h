// The images a command was given: files as listed, folders expanded to their image files
// (recursively, by extension, sorted by path), for classify and embed.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/command.h"
#include "ops/util.h"
#include "vit/io/preprocess.h"

namespace vitpe::app {

// Files are kept as given (reading them says what is wrong); a folder without image files, or
// one that cannot be listed, is an error (exit 1) naming it.
inline std::vector<std::string> image_inputs(const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      out.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code e2;
      if (it->is_regular_file(e2) && has_image_extension(it->path().string())) {
        found.push_back(it->path().string());
      }
    }
    if (ec) throw ExitError{1, printable(in) + ": cannot list the folder: " + ec.message()};
    if (found.empty()) {
      throw ExitError{1, printable(in) + ": the folder holds no image files (expected " +
                             image_extensions_text() + ")"};
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

}  // namespace vitpe::app
