// libFuzzer harness: the safetensors reader (vit/io/safetensors.h) on arbitrary bytes. Every
// tensor the header declares is read back, so an offset or size the validation let through
// would show as an out-of-bounds read under ASan.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "vit/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int init = vitpe::fuzz::init_single_thread();
  (void)init;
  static const vitpe::fuzz::ScratchFile file(".safetensors");
  const std::string& path = file.write(data, size);
  vitpe::fuzz::expect_clean([&] {
    const vitpe::SafeTensorsFile st = vitpe::SafeTensorsFile::open(path);
    size_t touched = 0;
    for (const auto& [key, value] : st.metadata()) touched += key.size() + value.size();
    for (const std::string& name : st.names()) {
      const vitpe::TensorInfo& info = st.info(name);
      const auto bytes = st.raw(name);
      if (bytes.size() != info.end - info.begin) {
        vitpe::fuzz::finding("raw() size differs from the header's range", name.c_str());
      }
      for (std::byte b : bytes) touched += static_cast<size_t>(b);
      if (info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16") {
        const vitpe::Tensor t = st.get(name);
        if (t.numel() != info.numel()) {
          vitpe::fuzz::finding("get() returned another element count", name.c_str());
        }
      }
    }
    vitpe::fuzz::keep(touched);
  });
  return 0;
}
