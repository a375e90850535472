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
#include <string>

namespace remat {

void write_file_atomically(const std::string& path, const void* data, std::size_t size);
inline void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

// The temporaries of `path` that processes which are no longer running left
// behind (a kill -9 between creating and renaming): removed.
void remove_stale_temporaries(const std::string& path);

}  // namespace remat
