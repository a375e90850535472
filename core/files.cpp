#include "core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/text.hpp"

namespace remat {

int open_regular_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw UserError("an empty path was given for " + what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw UserError(path + ": cannot open " + what + " (" + (err == ENOENT ? "no such file" : std::strerror(err)) + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(path + ": not a regular file (" + what + " must be one; a FIFO, device or socket is refused)");
  }
  // Reads of a regular file never block anyway; the flag goes, so the
  // descriptor reads as any other.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
  const int fd = open_regular_file(path, what);
  struct stat st {};
  ::fstat(fd, &st);
  if (std::uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    throw UserError(path + ": " + human_bytes(double(st.st_size)) + ", more than " + what + " can be (at most " +
                    human_bytes(double(max_bytes)) + ")");
  }
  std::string text(std::size_t(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += std::size_t(n);
  }
  ::close(fd);
  if (got != text.size()) throw UserError(path + ": cannot read " + what + " (it changed while being read)");
  return text;
}

}  // namespace remat
