#include "harness/io/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace remat {

FileLock::FileLock(const std::string& path, const std::function<void()>& waiting) : lock_path_(path + ".lock") {
  bool told = false;
  for (;;) {
    fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) throw UserError(path + ": cannot create the lock file " + lock_path_ + " (" + std::strerror(errno) + ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (waiting && !told) waiting();
      told = true;
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
    // Held; but the holder before us may have removed this lock file, in
    // which case a third process may hold a lock on a new one.
    struct stat held {}, now {};
    if (::fstat(fd_, &held) == 0 && ::stat(lock_path_.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev)
      return;
    ::close(fd_);
  }
}

FileLock::~FileLock() {
  ::unlink(lock_path_.c_str());  // while still holding it: see the constructor
  ::close(fd_);
}

}  // namespace remat
