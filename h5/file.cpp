// h5::File and h5::Handle: opening, creating in memory, saving atomically.
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "h5/atomic_file.hpp"
#include "h5/h5.hpp"

namespace remat::h5 {
namespace {

// HDF5 prints its error stack by default; we report our own one-line errors.
void silence() {
  static const bool once = (H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr), true);
  (void)once;
}

// File access through HDF5's core driver without a backing store: the file
// is read into memory (if it exists) and never written back by HDF5.
// HDF5 (1.10 and later) flocks every file it opens, without waiting, and
// fails the open where it cannot: on file systems without flock (NFS and
// Lustre mounts on clusters, where job arrays write their parts) and while
// another process holds a conflicting lock, both reported as if the file
// were damaged. remat never writes a file in place (it edits a copy in
// memory and replaces the file atomically, under its own FileLock), so a
// reader always sees a whole file and HDF5's lock only adds failures.
Handle unlocked_access() {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid()) throw EnvironmentError("HDF5: cannot create file access properties");
#if H5_VERSION_GE(1, 10, 7)
  if (H5Pset_file_locking(fapl.id(), false, true) < 0) throw EnvironmentError("HDF5: cannot turn file locking off");
#endif
  return fapl;
}

Handle in_memory_access() {
  Handle fapl = unlocked_access();
  if (H5Pset_fapl_core(fapl.id(), 1 << 20, /*backing_store=*/0) < 0)
    throw EnvironmentError("HDF5: cannot set up in-memory file access");
  return fapl;
}

void check_readable(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw UserError(path + ": no such file");
  if (!std::filesystem::is_regular_file(status)) throw UserError(path + ": not a regular file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw UserError(path + ": not an HDF5 file");
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    if (valid() && close_) close_(id_);
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
  }
  return *this;
}

Handle::~Handle() {
  if (valid() && close_) close_(id_);
}

File File::open(const std::string& path) {
  silence();
  check_readable(path);
  const Handle fapl = unlocked_access();
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id());
  if (id < 0) throw UserError(path + ": cannot open (truncated or corrupt HDF5 file?)");
  return File(Handle(id, H5Fclose), path, false);
}

File File::create(const std::string& path) {
  silence();
  const Handle fapl = in_memory_access();
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) throw UserError(path + ": cannot create an HDF5 file in memory");
  return File(Handle(id, H5Fclose), path, true);
}

File File::edit(const std::string& path) {
  silence();
  check_readable(path);
  const Handle fapl = in_memory_access();
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.id());
  if (id < 0) throw UserError(path + ": cannot open (truncated or corrupt HDF5 file?)");
  return File(Handle(id, H5Fclose), path, true);
}

std::vector<char> File::image() const {
  if (!in_memory_) throw std::logic_error(path_ + ": image() of a file opened for reading");
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) throw UserError(path_ + ": cannot finish the file in memory");
  const ssize_t size = H5Fget_file_image(id(), nullptr, 0);
  if (size < 0) throw UserError(path_ + ": cannot finish the file in memory");
  std::vector<char> image;
  image.reserve(static_cast<std::size_t>(size));
  advise_huge_pages(image.data(), image.capacity());  // a results or weights file can be gigabytes
  image.resize(static_cast<std::size_t>(size));
  if (H5Fget_file_image(id(), image.data(), image.size()) != size)
    throw UserError(path_ + ": cannot finish the file in memory");
  return image;
}

File File::from_image(const std::vector<char>& image, const std::string& label) {
  silence();
  const Handle fapl = in_memory_access();
  // HDF5 copies the image: `image` need not outlive the file.
  if (H5Pset_file_image(fapl.id(), const_cast<char*>(image.data()), image.size()) < 0)
    throw UserError(label + ": cannot read an HDF5 image of " + std::to_string(image.size()) + " bytes");
  const hid_t id = H5Fopen(label.c_str(), H5F_ACC_RDONLY, fapl.id());
  if (id < 0) throw UserError(label + ": not an HDF5 image (truncated?)");
  return File(Handle(id, H5Fclose), label, false);
}

File File::create_on_disk(const std::string& path, const std::string& label) {
  silence();
  // Through stdio: HDF5's default (sec2) driver resolves a symbolic link to
  // the file's "real" name, and an unnamed temporary (AtomicFile) is reached
  // only through the link /proc/self/fd/N.
  const Handle fapl = unlocked_access();
  if (H5Pset_fapl_stdio(fapl.id()) < 0) throw EnvironmentError("HDF5: cannot select the stdio driver");
#if H5_VERSION_GE(1, 10, 7)
  if (H5Pset_file_locking(fapl.id(), false, true) < 0) throw EnvironmentError("HDF5: cannot turn file locking off");
#endif
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) throw UserError(label + ": cannot create an HDF5 file at " + path);
  return File(Handle(id, H5Fclose), label, false);
}

void File::close() {
  const Handle file(std::move(handle_));  // closed when this returns, or throws
  if (H5Fflush(file.id(), H5F_SCOPE_GLOBAL) < 0) throw UserError(path_ + ": cannot finish the file (disk full?)");
}

void File::save() const {
  const std::vector<char> bytes = image();
  write_file_atomically(path_, bytes.data(), bytes.size());
}

void copy(const File& src, const std::string& src_path, const File& dst, const std::string& dst_path) {
  if (H5Ocopy(src.id(), src_path.c_str(), dst.id(), dst_path.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
    throw UserError(src.path() + ": cannot copy " + src_path + " into " + dst.path());
}

}  // namespace remat::h5
