#include "h5/atomic_folder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "h5/atomic_file.hpp"

namespace remat {
namespace {

namespace fs = std::filesystem;

// Every file under the staging folder reaches the disk before the folder
// takes the target's place.
void sync_tree(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fsync(fd);
    ::close(fd);
  }
  sync_directory(dir.string());
}

}  // namespace

AtomicFolder::AtomicFolder(const std::string& target) {
  fs::path t = fs::path(target).lexically_normal();
  if (!t.empty() && t.filename().empty()) t = t.parent_path();  // "dir/" is "dir"
  const std::string name = t.filename().string();
  if (target.empty() || name.empty() || name == "." || name == ".." || t == t.root_path())
    throw UserError("'" + target + "': not a folder name to write into; give the folder by its name (e.g. out/model)");
  target_ = t.string();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_, ec)) && !fs::is_directory(fs::symlink_status(target_, ec)))
    throw UserError(target_ + ": exists and is not a folder");
  const fs::path parent = t.parent_path().empty() ? fs::path(".") : t.parent_path();
  if (!fs::is_directory(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) throw UserError(target_ + ": cannot create the folder it goes in (" + ec.message() + ")");
  }
  remove_stale_temporaries(target_);  // staging folders of exports that were killed
  for (int attempt = 0;; ++attempt) {
    staging_ = fresh_temporary_name(target_);
    if (fs::create_directory(staging_, ec)) break;
    if (ec || attempt > 100)
      throw UserError(target_ + ": cannot create a folder beside it to write into (" +
                      (ec ? ec.message() : std::string("every name taken")) + "); nothing written");
  }
}

AtomicFolder::~AtomicFolder() {
  std::error_code ec;
  if (!committed_) fs::remove_all(staging_, ec);
}

void AtomicFolder::commit(const std::function<bool(const std::string& name)>& keep) {
  std::error_code ec;
  const bool replacing = fs::is_directory(target_, ec);
  if (replacing)
    for (const auto& entry : fs::directory_iterator(target_, ec)) {
      const std::string name = entry.path().filename().string();
      const fs::path to = fs::path(staging_) / name;
      if (fs::exists(fs::symlink_status(to, ec)) || !keep(name)) continue;
      std::error_code copied;
      fs::copy(entry.path(), to,
               fs::copy_options::recursive | fs::copy_options::create_hard_links | fs::copy_options::copy_symlinks,
               copied);
      if (copied)
        throw UserError(target_ + ": cannot carry " + name + " over into the new folder (" + copied.message() +
                        "); the folder is unchanged");
    }
  sync_tree(staging_);
  int err = 0;
  if (!replacing) {
    if (::rename(staging_.c_str(), target_.c_str()) != 0) err = errno;
  } else if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
    err = errno;
    if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) {
      // A file system without the exchange: the old folder steps aside under
      // a name no sweep removes, the new one takes its place. (A kill between
      // the two renames leaves the old folder there, as "<target>.previous.<pid>".)
      const std::string aside = target_ + ".previous." + std::to_string(::getpid());
      err = ::rename(target_.c_str(), aside.c_str()) != 0 ? errno : 0;
      if (!err && ::rename(staging_.c_str(), target_.c_str()) != 0) {
        err = errno;
        ::rename(aside.c_str(), target_.c_str());
      }
      if (!err) fs::rename(aside, staging_, ec);  // removed below, as after an exchange
    }
  }
  if (err)
    throw UserError(target_ + ": cannot put the new folder in place (" + std::strerror(err) +
                    "); the folder is unchanged");
  committed_ = true;
  sync_directory(fs::path(target_).parent_path().string());
  if (replacing) fs::remove_all(staging_, ec);  // the old folder, now under the staging name
}

}  // namespace remat
