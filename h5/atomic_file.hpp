#pragma once
// Replacing a user's file without ever leaving a broken one: the new content
// goes to a temporary beside the target, every write and the close are
// checked, the data is synced to disk, and only then is the temporary renamed
// over the target (and the directory synced). On any failure the target is
// untouched, the temporary removed, and a UserError names the file and the
// system's reason ("No space left on device").
// The temporary has no name while it is written (O_TMPFILE, where the file
// system has it), so even a writer killed with SIGKILL leaves nothing; it is
// named "<target>.partial.<pid>.<n>" only for the instant between linking it
// in and the rename. Where the file system has no unnamed files it is named
// from the start, created exclusively (a planted symlink or a concurrent
// writer's temporary is never followed or reused), and removed by the next
// write of the same target once its writer is dead.
#include <cstddef>
#include <cstdint>
#include <string>

namespace remat {

void write_file_atomically(const std::string& path, const void* data, std::size_t size);

// The same, for content written piece by piece (weights of several
// gigabytes is never held whole in memory): the temporary is created at
// once; write() appends to it, or a library writes it by path(); commit()
// syncs it and renames it over the target. Destroyed uncommitted (an error,
// an exception), it removes the temporary and the target stays as it was.
class AtomicFile {
 public:
  // `sweep`: first remove the temporaries dead writers left beside the target
  // (one look at its folder); a writer filling a folder of its own skips it.
  explicit AtomicFile(std::string target, bool sweep = true);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // The temporary's path, for a library that writes it by path: for an
  // unnamed one "/proc/self/fd/N", a link that the library must open as it
  // is, not resolve (h5::File::create_on_disk opens it through stdio).
  const std::string& path() const { return temp_; }
  const std::string& target() const { return target_; }
  void write(const void* data, std::size_t size);  // UserError naming the target and the system's reason
  void commit();

 private:
  void name_temporary();
  std::string target_, temp_;
  int fd_ = -1;
  bool named_ = false;  // temp_ is a name beside the target, not /proc/self/fd/N
  bool committed_ = false;
};

// "<target>.partial.<pid>.<n>": a name for a temporary beside `target` (a
// file, or AtomicFolder's staging folder) whose writer a later run can tell
// dead or alive (remove_stale_temporaries).
std::string fresh_temporary_name(const std::string& target);

// Makes a rename or a new entry in folder `dir` ("" is ".") durable; best effort.
void sync_directory(const std::string& dir);

// Bytes free for a file at `path` (its folder's file system); -1 if unknown.
std::int64_t free_bytes(const std::string& path);
inline void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

// The temporaries of `path` that processes which are no longer running left
// behind (a kill -9 between creating and renaming): removed.
void remove_stale_temporaries(const std::string& path);

}  // namespace remat
