// Atomic file writes (see files.h): POSIX open/write/fsync/rename, so that every failure has
// errno's text and the rename is made durable by syncing the folder.
#include "ops/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace vitpe {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

void write_all(int fd, const void* data, size_t n, const std::string& path,
               const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(path, "cannot write the temporary file '" + tmp + "'");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& pieces) {
  // Same folder as the target, so that rename() stays on one file system and is atomic.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create the temporary file '" + tmp + "'");
  try {
    for (const ByteSpan& s : pieces) write_all(fd, s.data, s.size, path, tmp);
    if (::fsync(fd) != 0) fail(path, "cannot flush the temporary file '" + tmp + "' to disk");
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) fail(path, "cannot close the temporary file '" + tmp + "'");
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      fail(path, "cannot rename the temporary file '" + tmp + "' over it");
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; a failure here does not undo a complete write.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace vitpe
