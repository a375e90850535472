#include "h5/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.hpp"

namespace remat {
namespace {

namespace fs = std::filesystem;

// "<path>.partial.<pid>.<random>": the pid tells a later run whether the
// writer is still alive (remove_stale_temporaries).
const char* const kTempInfix = ".partial.";

// The error names what became of the target: a write that fails leaves it
// exactly as it was (with whatever earlier writes committed), or absent.
[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  throw UserError(path + ": " + what + " (" + std::strerror(err) + "); " +
                  (existed ? "the file keeps what it held before this write" : "no file was created"));
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

AtomicFile::AtomicFile(std::string target) : target_(std::move(target)) {
  // Temporaries of writers that died (killed mid-write) go now, so none
  // outlives the next write of the same file.
  remove_stale_temporaries(target_);
  std::random_device random;
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_ = target_ + kTempInfix + std::to_string(::getpid()) + "." + std::to_string(random() % 1000000);
    // O_EXCL refuses an existing name, a symlink included: nothing planted
    // there is ever written through.
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100)) fail(target_, "cannot create a temporary file beside it", errno);
  }
  // A replaced file keeps its permissions.
  struct stat old {};
  if (::stat(target_.c_str(), &old) == 0) ::fchmod(fd_, old.st_mode & 07777);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (const int err = write_all(fd_, static_cast<const char*>(data), size)) fail(target_, "cannot write", err);
}

void AtomicFile::commit() {
  // Whatever wrote the temporary by its path (a library) has closed it: its
  // data is synced through our descriptor of the same file.
  int err = ::fsync(fd_) != 0 ? errno : 0;
  if (::close(fd_) != 0 && !err) err = errno;
  fd_ = -1;
  if (!err && ::rename(temp_.c_str(), target_.c_str()) != 0) err = errno;
  if (err) fail(target_, "cannot write", err);
  committed_ = true;
  sync_directory(fs::path(target_).parent_path());
}

void write_file_atomically(const std::string& path, const void* data, std::size_t size) {
  AtomicFile file(path);
  file.write(data, size);
  file.commit();
}

std::int64_t free_bytes(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  const fs::space_info s = fs::space(dir, ec);
  return ec ? -1 : std::int64_t(s.available);
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
