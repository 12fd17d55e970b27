// libFuzzer harness: the Fashion-MNIST IDX reader (vit/train/data.h, read_idx_gz). The first
// byte chooses how the rest reaches the reader: bit 0 set, gzip-compressed here first (so the
// fuzzer explores the IDX header and sizes rather than only gzip's checksums); clear, as the
// raw file (a broken or non-gzip stream). Bit 1 chooses labels (1 dimension) or images (3).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_common.h"
#include "vit/train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int init = vitpe::fuzz::init_single_thread();
  (void)init;
  static const vitpe::fuzz::ScratchFile file(".gz");
  if (size < 1) return 0;
  const bool compress = (data[0] & 1) != 0;
  const int ndim = (data[0] & 2) != 0 ? 3 : 1;
  if (compress) {
    gzFile gz = gzopen(file.path().c_str(), "wb1");
    if (gz == nullptr) vitpe::fuzz::finding("gzopen", file.path().c_str());
    const unsigned len = static_cast<unsigned>(size - 1);
    if ((len > 0 && gzwrite(gz, data + 1, len) != static_cast<int>(len)) || gzclose(gz) != Z_OK) {
      vitpe::fuzz::finding("gzwrite", file.path().c_str());
    }
  } else {
    file.write(data + 1, size - 1);
  }
  vitpe::fuzz::expect_clean([&] {
    const vitpe::IdxArray a = vitpe::read_idx_gz(file.path(), ndim);
    // The product in long double: dimensions up to 2^32 - 1 each must not overflow here either.
    long double n = 1;
    for (int64_t d : a.dims) n *= static_cast<long double>(d);
    if (static_cast<int64_t>(a.dims.size()) != ndim ||
        n != static_cast<long double>(a.data.size())) {
      vitpe::fuzz::finding("the IDX array disagrees with its dimensions", file.path().c_str());
    }
  });
  return 0;
}
