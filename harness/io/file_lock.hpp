#pragma once
// An exclusive advisory lock (flock) that serialises the processes writing
// one file. It is taken on a lock file beside it ("<path>.lock"), not on
// the file itself, because the file is replaced by a rename on every write
// and a lock on the old inode would not exclude a writer of the new one.
// The lock file is removed on release; a waiter that wakes on a removed
// lock file retries on the new one. flock locks die with their process, so
// a killed writer never leaves the file locked.
#include <functional>
#include <string>

namespace remat {

class FileLock {
 public:
  // Blocks until the lock is held; calls `waiting` once if it must wait.
  explicit FileLock(const std::string& path, const std::function<void()>& waiting = {});
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace remat
