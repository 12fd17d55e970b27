// The dataset factory and the seed mixer.
#include "vit/train/data.h"

#include <stdexcept>

#include "vit/train/data_internal.h"

namespace vitpe {

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  auto fin = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = fin(a);
  h = fin(h ^ b);
  h = fin(h ^ c);
  h = fin(h ^ d);
  return h;
}

std::unique_ptr<Dataset> make_dataset(const DatasetOptions& o) {
  if (o.name == "fashion-mnist" || o.name == "fmnist") return make_fashion_mnist(o);
  if (o.name == "procedural" || o.name == "relations") return make_procedural(o);
  if (o.name == "quadrant") return make_quadrant(o);
  if (o.name == "folder" || o.name.rfind("folder:", 0) == 0) return make_folder(o);
  throw std::invalid_argument("unknown dataset '" + o.name +
                              "' (known: fashion-mnist, procedural, quadrant, folder:PATH)");
}

}  // namespace vitpe
