// safetensors checkpoints: a validating reader and an atomic writer.
//
// Format (https://github.com/huggingface/safetensors): 8 bytes little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the data section; offsets are relative to it.
//
// The reader trusts nothing in the file: every size, offset, dtype and shape is checked when
// the file is opened (the header through the bounded JSON reader, ops/json_limits.h), and the
// tensors are read with pread into memory this process owns, every byte count checked. The file
// is not memory-mapped: a mapped file that shrinks while it is read (a `cp` or `rsync --inplace`
// over a model being loaded) kills the reader with SIGBUS; read this way it is an error naming
// the tensor, as is a file whose size or modification time changed since it was opened. Every
// error is a std::runtime_error naming the file, the tensor (when there is one), what was
// expected and what was found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/tensor.h"

namespace vitpe {

// One entry of the header, validated.
struct TensorInfo {
  std::string dtype;           // as in the file: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;  // may be empty (a scalar)
  size_t begin = 0;            // byte range [begin, end) within the data section
  size_t end = 0;
  int64_t numel() const;
};

class SafeTensorsFile {
 public:
  // Opens and validates the file (reading its header); throws std::runtime_error naming the file
  // otherwise. The file stays open until this object is destroyed.
  static SafeTensorsFile open(const std::string& path);

  SafeTensorsFile(SafeTensorsFile&& o) noexcept;
  SafeTensorsFile& operator=(SafeTensorsFile&& o) noexcept;
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;
  ~SafeTensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  // Throws naming the file and the tensor when it is absent.
  const TensorInfo& info(const std::string& name) const;

  // The tensor as a new f32 CPU tensor: F32 read in place, F16 and BF16 converted exactly.
  // Integer and other dtypes (derived buffers such as Swin's relative_position_index) are
  // validated at open but cannot be loaded: skip them by name or dtype, `get` throws for them.
  // Safe to call from several threads.
  Tensor get(const std::string& name) const;
  // The tensor's bytes, little-endian, as stored.
  std::vector<std::byte> raw(const std::string& name) const;

 private:
  SafeTensorsFile() = default;
  void close_file();
  // n bytes at `offset` of the file into dst; throws naming `what` when the file ends early.
  void read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const;
  // Throws naming the tensor when the file's size or modification time changed since open.
  void check_unchanged(const std::string& name) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;   // at open
  int64_t modified_ns_ = 0;  // st_mtim at open
  uint64_t data_start_ = 0;  // file offset of the data section
  size_t data_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> infos_;
};

// Size in bytes of one element of a safetensors dtype ("F32" -> 4); 0 for an unknown dtype.
size_t safetensors_dtype_size(const std::string& dtype);

// IEEE half -> float (exact, including subnormals, infinities and NaN).
float f16_to_float(uint16_t h);

// Writes CPU or CUDA tensors (f32 as F32, bf16 as BF16) in name order with `metadata` as
// __metadata__. The header is padded with spaces to a multiple of 8 bytes so the data section
// is aligned. Atomic: writes `path.tmp.<pid>` in the same directory, fsyncs it and renames it
// over `path`; on any failure the temporary file is removed and `path` is left untouched.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace vitpe
