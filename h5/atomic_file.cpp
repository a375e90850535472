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

}  // namespace

std::string fresh_temporary_name(const std::string& target) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return target + kTempInfix + std::to_string(::getpid()) + "." + std::to_string(random() % 1000000);
}

AtomicFile::AtomicFile(std::string target, bool sweep) : target_(std::move(target)) {
  // A device, a FIFO or a folder in the target's place is never replaced by
  // a file (root could rename over /dev/null).
  if (target_.empty()) throw UserError("an empty path was given for an output file");
  std::error_code ec;
  const fs::file_status there = fs::status(target_, ec);
  if (fs::exists(there) && !fs::is_regular_file(there))
    throw UserError(target_ + ": exists and is not a regular file; refusing to replace it");
  // Temporaries of writers that died (killed while theirs had a name) go
  // now, so none outlives the next write.
  if (sweep) remove_stale_temporaries(target_);
  const fs::path dir = fs::path(target_).parent_path().empty() ? fs::path(".") : fs::path(target_).parent_path();
#ifdef O_TMPFILE
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
  if (fd_ >= 0) temp_ = "/proc/self/fd/" + std::to_string(fd_);
#endif
  if (fd_ < 0) name_temporary();  // a file system without unnamed files
  // A replaced file keeps its permissions (a new one has the umask's).
  struct stat old {};
  if (::stat(target_.c_str(), &old) == 0) ::fchmod(fd_, old.st_mode & 07777);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);  // an unnamed temporary vanishes with it
  if (named_) ::unlink(temp_.c_str());
}

void AtomicFile::name_temporary() {
  for (int attempt = 0;; ++attempt) {
    const std::string name = fresh_temporary_name(target_);
    int err = 0;
    if (fd_ >= 0) {
      // The unnamed temporary gets the name (linkat cannot replace a file:
      // the rename in commit() does that).
      if (::linkat(AT_FDCWD, temp_.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) != 0) err = errno;
    } else {
      // O_EXCL refuses an existing name, a symlink included: nothing planted
      // there is ever written through.
      fd_ = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0) err = errno;
    }
    if (!err) {
      temp_ = name;
      named_ = true;
      return;
    }
    if (err != EEXIST || attempt > 100) fail(target_, "cannot create a temporary file beside it", err);
  }
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (const int err = write_all(fd_, static_cast<const char*>(data), size)) fail(target_, "cannot write", err);
}

void AtomicFile::commit() {
  // Whatever wrote the temporary by its path (a library) has closed it: its
  // data is synced through our descriptor of the same file.
  int err = ::fsync(fd_) != 0 ? errno : 0;
  if (!err && !named_) name_temporary();  // named only now: a kill before leaves nothing
  if (::close(fd_) != 0 && !err) err = errno;
  fd_ = -1;
  if (!err && ::rename(temp_.c_str(), target_.c_str()) != 0) err = errno;
  if (err) fail(target_, "cannot write", err);
  committed_ = true;
  sync_directory(fs::path(target_).parent_path().string());
}

void write_file_atomically(const std::string& path, const void* data, std::size_t size) {
  AtomicFile file(path);
  file.write(data, size);
  file.commit();
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
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
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(it->path(), ec);  // a staging folder too
  }
}

}  // namespace remat
