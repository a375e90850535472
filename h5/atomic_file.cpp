#include "h5/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "autodiff/error.hpp"

namespace remat {
namespace {

namespace fs = std::filesystem;

// "<path>.partial.<pid>.<random>": the pid tells a later run whether the
// writer is still alive (remove_stale_temporaries).
const char* const kTempInfix = ".partial.";

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw UserError(path + ": " + what + " (" + std::strerror(err) + "); the previous file, if any, is unchanged");
}

// Writes all of it, retrying short writes and interruptions. A file-size
// limit raises SIGXFSZ, which would kill the process before write() could
// report EFBIG: it is ignored for the duration, so the error comes back here.
int write_all(int fd, const char* p, std::size_t n) {
  struct sigaction ignore {}, previous{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &previous);
  int err = 0;
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : ENOSPC;
      break;
    }
    p += w;
    n -= std::size_t(w);
  }
  sigaction(SIGXFSZ, &previous, nullptr);
  return err;
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, const void* data, std::size_t size) {
  std::random_device random;
  std::string temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = path + kTempInfix + std::to_string(::getpid()) + "." + std::to_string(random() % 1000000);
    // O_EXCL refuses an existing name, a symlink included: nothing planted
    // there is ever written through.
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt > 100)) fail(path, "cannot create a temporary file beside it", errno);
  }
  // A replaced file keeps its permissions.
  struct stat old {};
  if (::stat(path.c_str(), &old) == 0) ::fchmod(fd, old.st_mode & 07777);
  int err = write_all(fd, static_cast<const char*>(data), size);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(temp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(temp.c_str());
    fail(path, "cannot write", err);
  }
  sync_directory(fs::path(path).parent_path());
}

void remove_stale_temporaries(const std::string& path) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + kTempInfix;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    char* after = nullptr;
    const long pid = std::strtol(rest.c_str(), &after, 10);
    if (pid <= 0 || *after != '.') continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);
  }
}

}  // namespace remat
