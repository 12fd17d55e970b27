// Writes the class-name lists of the data folder (CMakeLists.txt, "the data folder") from the
// library's own lists, one name per line: imagenet-1k.txt and fashion-mnist.txt.
// Usage: vitpe_write_labels FOLDER
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "vit/models/model.h"

namespace {

bool write(const std::filesystem::path& path, const std::vector<std::string>& labels) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    for (const std::string& l : labels) out << l << '\n';
    if (!out.flush()) {
      std::fprintf(stderr, "vitpe_write_labels: cannot write %s\n", tmp.c_str());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::fprintf(stderr, "vitpe_write_labels: %s: %s\n", path.c_str(), ec.message().c_str());
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: vitpe_write_labels FOLDER\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const bool ok = write(dir / "imagenet-1k.txt", vitpe::imagenet_labels()) &&
                  write(dir / "fashion-mnist.txt", vitpe::kFashionMnistLabels);
  return ok ? 0 : 1;
}
