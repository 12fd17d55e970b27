// safetensors reader (pread + validation) and atomic writer. See vit/io/safetensors.h.
#include "vit/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ops/files.h"
#include "ops/json_limits.h"

namespace vitpe {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace {

using nlohmann::json;

// Headers of real checkpoints are a few hundred KB; anything past this is hostile or corrupt.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// JSON nesting a header may have (it needs 3: the object, an entry, its shape).
constexpr int kMaxHeaderDepth = 8;
// Tensors in one file (checkpoints of the largest models hold a few thousand), elements of a
// shape or offsets array, bytes of a tensor name or metadata key, values of one entry (or of
// __metadata__): far above any real file, and low enough that a 100 MB header of the worst kind
// stays within a few hundred MB while it is read.
constexpr int64_t kMaxTensors = 1 << 18;
constexpr int64_t kMaxHeaderArray = 1024;
constexpr int64_t kMaxNameBytes = 4096;
constexpr int64_t kMaxEntryValues = 1 << 16;

// Errors this file raises, told apart from the JSON reader's (which get the file name added).
struct SafeTensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafeTensorsError("safetensors file '" + path + "': " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  throw SafeTensorsError("safetensors file '" + path + "', tensor '" + name + "': " + what);
}

std::string errno_text() { return std::strerror(errno); }

// A short rendering of a JSON value for "found ..." in messages.
std::string show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Parses one entry {"dtype", "shape", "data_offsets"}; checks everything that does not depend
// on the other entries.
TensorInfo parse_entry(const std::string& path, const std::string& name, const json& e,
                       size_t data_size) {
  if (!e.is_object()) fail_tensor(path, name, "expected a JSON object, found " + show(e));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(key)) fail_tensor(path, name, std::string("missing key '") + key + "'");
  }
  TensorInfo info;

  const json& dt = e["dtype"];
  if (!dt.is_string()) fail_tensor(path, name, "expected dtype as a string, found " + show(dt));
  info.dtype = dt.get<std::string>();
  size_t elem = safetensors_dtype_size(info.dtype);
  if (elem == 0) {
    fail_tensor(path, name,
                "unknown dtype '" + info.dtype +
                    "' (expected one of F32, F16, BF16, F64, I64, I32, I16, I8, U64, U32, U16, "
                    "U8, BOOL, F8_E4M3, F8_E5M2)");
  }

  const json& sh = e["shape"];
  if (!sh.is_array()) fail_tensor(path, name, "expected shape as an array, found " + show(sh));
  uint64_t numel = 1;
  for (const json& d : sh) {
    if (!d.is_number_unsigned()) {  // nlohmann parses non-negative integers as unsigned
      fail_tensor(path, name, "expected shape of non-negative integers, found " + show(sh));
    }
    uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, v, &numel)) {
      fail_tensor(path, name, "shape " + show(sh) + " has more elements than can be addressed");
    }
    info.shape.push_back(static_cast<int64_t>(v));
  }
  uint64_t nbytes = 0;
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(elem), &nbytes)) {
    fail_tensor(path, name, "shape " + show(sh) + " has more bytes than can be addressed");
  }

  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    fail_tensor(
        path, name,
        "expected data_offsets as [begin, end] of non-negative integers, found " + show(off));
  }
  uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end) {
    fail_tensor(path, name,
                "expected data_offsets [begin, end] with begin <= end, found " + show(off));
  }
  if (end > data_size) {
    fail_tensor(path, name,
                "data_offsets " + show(off) + " end beyond the data section of " +
                    std::to_string(data_size) + " bytes (file truncated?)");
  }
  if (end - begin != nbytes) {
    fail_tensor(path, name,
                "expected " + std::to_string(nbytes) + " bytes for dtype " + info.dtype +
                    " and shape " + show(sh) + ", found data_offsets " + show(off) + " spanning " +
                    std::to_string(end - begin) + " bytes");
  }
  info.begin = static_cast<size_t>(begin);
  info.end = static_cast<size_t>(end);
  return info;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf or NaN (payload kept)
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);  // rebias 15 -> 127
  } else if (man == 0) {
    u = sign;  // +-0
  } else {
    // Subnormal half: value = man * 2^-24; normalise it for the float encoding.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

// The limits of a header (the root object's members are tensors, handled one at a time).
JsonLimits header_limits() {
  JsonLimits l;
  l.max_depth = kMaxHeaderDepth;
  l.max_members = kMaxTensors;
  l.max_elements = kMaxHeaderArray;
  l.max_key_bytes = kMaxNameBytes;
  l.max_values = kMaxEntryValues;
  return l;
}

int64_t modified_ns(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// Tensors' data ranges must be disjoint: sorted by start, each begins at or after the previous
// end (empty tensors excepted).
void check_disjoint(const std::string& path, const std::map<std::string, TensorInfo>& infos) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> ranges;
  for (const auto& [name, info] : infos) {
    if (info.end > info.begin) ranges.push_back({&name, &info});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const TensorInfo& prev = *ranges[i - 1].second;
    const TensorInfo& cur = *ranges[i].second;
    if (cur.begin < prev.end) {
      fail_tensor(path, *ranges[i].first,
                  "data_offsets [" + std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                      "] overlap tensor '" + *ranges[i - 1].first + "' at [" +
                      std::to_string(prev.begin) + ", " + std::to_string(prev.end) +
                      "] (expected disjoint ranges)");
    }
  }
}

}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  SafeTensorsFile f;
  f.path_ = path;
  // O_NONBLOCK: a FIFO (or device) must reach the regular-file check below instead of blocking
  // open() until a writer appears; regular files ignore the flag.
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd_ < 0) fail(path, "cannot open: " + errno_text());
  // From here on `f` owns the descriptor: a throw closes it in the destructor.
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) fail(path, "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) fail(path, "expected a regular file");
  f.file_size_ = static_cast<uint64_t>(st.st_size);
  f.modified_ns_ = modified_ns(st);
  const uint64_t size = f.file_size_;
  if (size < 8) {
    fail(path, "expected at least 8 bytes (the header length), found a file of " +
                   std::to_string(size) + " bytes");
  }
  uint64_t header_len = 0;
  f.read_at(0, &header_len, 8, "the header length");
  if (header_len > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_len) + " is absurd (expected at most " +
                   std::to_string(kMaxHeaderBytes) + " bytes)");
  }
  if (header_len > size - 8) {
    fail(path, "header length " + std::to_string(header_len) + " exceeds the file: only " +
                   std::to_string(size - 8) + " bytes follow the length (file truncated?)");
  }
  f.data_start_ = 8 + header_len;
  f.data_size_ = static_cast<size_t>(size - 8 - header_len);
  std::string text(static_cast<size_t>(header_len), '\0');
  f.read_at(8, text.data(), text.size(), "the header");

  // Each entry is checked as soon as the parser has it, and dropped: memory holds the entries'
  // TensorInfo, never the header as a JSON document.
  json root;
  try {
    root = parse_json_members(text, header_limits(), [&](const std::string& name, json& value) {
      if (name != "__metadata__") {
        f.infos_[name] = parse_entry(path, name, value, f.data_size_);
        return;
      }
      if (!value.is_object()) {
        fail(path, "expected __metadata__ as an object of strings, found " + show(value));
      }
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m->is_string()) {
          fail(path, "expected __metadata__ values to be strings, found key '" + m.key() +
                         "' = " + show(*m));
        }
        f.metadata_[m.key()] = m->get<std::string>();
      }
    });
  } catch (const SafeTensorsError&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(path, std::string("header: ") + e.what());
  }
  if (!root.is_object()) fail(path, "expected a JSON object as header, found " + show(root));
  check_disjoint(path, f.infos_);
  return f;
}

SafeTensorsFile::SafeTensorsFile(SafeTensorsFile&& o) noexcept { *this = std::move(o); }

SafeTensorsFile& SafeTensorsFile::operator=(SafeTensorsFile&& o) noexcept {
  if (this != &o) {
    close_file();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    file_size_ = o.file_size_;
    modified_ns_ = o.modified_ns_;
    data_start_ = o.data_start_;
    data_size_ = std::exchange(o.data_size_, 0);
    metadata_ = std::move(o.metadata_);
    infos_ = std::move(o.infos_);
  }
  return *this;
}

SafeTensorsFile::~SafeTensorsFile() { close_file(); }

void SafeTensorsFile::close_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void SafeTensorsFile::read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    // Linux moves at most about 2 GiB per call; a smaller piece keeps the loop honest.
    const size_t want = std::min<size_t>(n - done, size_t{1} << 30);
    const ssize_t got = ::pread(fd_, out + done, want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path_, "cannot read " + what + ": " + errno_text());
    if (got == 0) {
      fail(path_, "the file ends at byte " + std::to_string(offset + done) + " inside " + what +
                      " (bytes " + std::to_string(offset) + " to " + std::to_string(offset + n) +
                      "), but it had " + std::to_string(file_size_) +
                      " bytes when it was opened: it was truncated or overwritten while being "
                      "read");
    }
    done += static_cast<size_t>(got);
  }
}

void SafeTensorsFile::check_unchanged(const std::string& name) const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail_tensor(path_, name, "cannot stat: " + errno_text());
  if (static_cast<uint64_t>(st.st_size) != file_size_ || modified_ns(st) != modified_ns_) {
    fail_tensor(path_, name,
                "the file changed while it was read (" + std::to_string(file_size_) +
                    " bytes when opened, " + std::to_string(st.st_size) +
                    " now, modified since): load it again once it is complete");
  }
}

std::vector<std::string> SafeTensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& kv : infos_) out.push_back(kv.first);
  return out;
}

const TensorInfo& SafeTensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) {
    fail_tensor(path_, name,
                "not found (the file holds " + std::to_string(infos_.size()) + " tensors)");
  }
  return it->second;
}

std::vector<std::byte> SafeTensorsFile::raw(const std::string& name) const {
  const TensorInfo& i = info(name);
  std::vector<std::byte> bytes(i.end - i.begin);
  read_at(data_start_ + i.begin, bytes.data(), bytes.size(), "tensor '" + name + "'");
  check_unchanged(name);
  return bytes;
}

Tensor SafeTensorsFile::get(const std::string& name) const {
  const TensorInfo& i = info(name);
  if (i.dtype != "F32" && i.dtype != "F16" && i.dtype != "BF16") {
    const bool integer = i.dtype[0] == 'I' || i.dtype[0] == 'U' || i.dtype == "BOOL";
    fail_tensor(path_, name,
                "expected dtype F32, F16 or BF16 to load as f32, found " + i.dtype +
                    (integer            ? " (integer tensors are derived buffers: skip them)"
                     : i.dtype == "F64" ? " (64-bit floats are not loaded: convert the "
                                          "checkpoint to F32, F16 or BF16)"
                                        : ""));
  }
  if (static_cast<int>(i.shape.size()) > kMaxDims) {
    fail_tensor(path_, name,
                "expected at most " + std::to_string(kMaxDims) + " dimensions, found " +
                    std::to_string(i.shape.size()));
  }
  Tensor t = Tensor::empty(Shape(i.shape));
  float* dst = t.f32();
  const int64_t n = i.numel();
  const std::string what = "tensor '" + name + "'";
  if (i.dtype == "F32") {
    read_at(data_start_ + i.begin, dst, static_cast<size_t>(n) * 4, what);
  } else {
    // Converted in pieces, so a half-precision tensor needs no second copy of its size.
    const bool bf16 = i.dtype == "BF16";
    constexpr int64_t kPiece = 1 << 15;
    std::vector<uint16_t> half(static_cast<size_t>(std::min(n, kPiece)));
    for (int64_t k0 = 0; k0 < n; k0 += kPiece) {
      const int64_t m = std::min(kPiece, n - k0);
      read_at(data_start_ + i.begin + static_cast<uint64_t>(2 * k0), half.data(),
              static_cast<size_t>(2 * m), what);
      for (int64_t k = 0; k < m; ++k) {
        dst[k0 + k] = bf16 ? bf16_to_float(half[k]) : f16_to_float(half[k]);
      }
    }
  }
  check_unchanged(name);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Writer

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Validate and order everything before touching the file system.
  std::vector<std::pair<std::string, Tensor>> sorted;
  sorted.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") {
      throw std::runtime_error("safetensors: cannot write '" + path +
                               "': '__metadata__' is reserved and cannot name a tensor");
    }
    if (!t.defined()) {
      throw std::runtime_error("safetensors: cannot write '" + path + "': tensor '" + name +
                               "' is undefined");
    }
    sorted.push_back({name, t.device() == Device::cpu ? t : t.to(Device::cpu)});
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].first == sorted[i - 1].first) {
      throw std::runtime_error("safetensors: cannot write '" + path + "': tensor '" +
                               sorted[i].first + "' is given more than once");
    }
  }

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : sorted) {
    json e;
    e["dtype"] = t.dtype() == DType::f32 ? "F32" : "BF16";
    e["shape"] = t.shape().vec();
    e["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = e;
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw std::runtime_error("safetensors: cannot write '" + path +
                             "': a tensor name or metadata entry is not valid UTF-8 (" + e.what() +
                             ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  const uint64_t header_len = text.size();

  std::vector<ByteSpan> pieces{{&header_len, 8}, {text.data(), text.size()}};
  for (const auto& kv : sorted) pieces.push_back({kv.second.raw(), kv.second.nbytes()});
  write_file_atomic(path, pieces);
}

}  // namespace vitpe
