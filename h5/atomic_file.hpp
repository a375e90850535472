#pragma once
// Replacing a user's file without ever leaving a broken one: the new content
// goes to a temporary beside the target (created exclusively, so a planted
// symlink or a concurrent writer's temporary is never followed or reused),
// every write and the close are checked, the data is synced to disk, and
// only then is the temporary renamed over the target (and the directory
// synced). On any failure the target is untouched, the temporary removed,
// and a UserError names the file and the system's reason ("No space left on
// device").
#include <cstddef>
#include <cstdint>
#include <string>

namespace remat {

void write_file_atomically(const std::string& path, const void* data, std::size_t size);

// The same, for content written piece by piece (a checkpoint of several
// gigabytes is never held whole in memory): the temporary is created at
// once; write() appends to it, or a library writes it by path(); commit()
// syncs it and renames it over the target. Destroyed uncommitted (an error,
// an exception), it removes the temporary and the target stays as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::string target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  const std::string& path() const { return temp_; }  // the temporary
  const std::string& target() const { return target_; }
  void write(const void* data, std::size_t size);  // UserError naming the target and the system's reason
  void commit();

 private:
  std::string target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Bytes free for a file at `path` (its folder's file system); -1 if unknown.
std::int64_t free_bytes(const std::string& path);
inline void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

// The temporaries of `path` that processes which are no longer running left
// behind (a kill -9 between creating and renaming): removed.
void remove_stale_temporaries(const std::string& path);

}  // namespace remat
