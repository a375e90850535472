#pragma once
// A thin RAII layer over the HDF5 C API: handles that close themselves,
// typed array and attribute I/O, and errors that name the file and the
// object instead of HDF5's error stack.
//
// Writing never touches the disk until everything is written: a new or
// edited file lives in memory (HDF5's core driver) and save() replaces the
// file on disk atomically (h5/atomic_file.hpp). HDF5 itself never writes to
// disk, so a full disk is one checked write of ours, never a half-closed
// HDF5 file (HDF5 1.10 crashes at exit on a file whose close failed).
//
// Reading trusts nothing in the file: every attribute is checked to be one
// value of the expected class before it is read, every dataset's type and
// shape before its data.
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/shape.hpp"

namespace remat::h5 {

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

class File {
 public:
  // Reads a file on disk; throws UserError if it is missing or not HDF5.
  static File open(const std::string& path);
  // A new, empty file in memory; save() writes it to `path`.
  static File create(const std::string& path);
  // An existing file read into memory for changes; `path` itself is
  // untouched until save().
  static File edit(const std::string& path);
  // Replaces `path` with the file as it is now, atomically (created and
  // edited files only). On failure `path` keeps its previous content.
  void save() const;
  // The bytes of a created or edited file as it is now (what save() writes).
  std::vector<char> image() const;
  // A file read from such bytes (read-only), named `label` in errors.
  static File from_image(const std::vector<char>& image, const std::string& label);
  // A new file written straight to disk at `path` (an AtomicFile's
  // temporary), for files too big to build in memory (an imported
  // model); close() finishes it. Check the free space first: HDF5 1.10
  // does not survive a failed close.
  static File create_on_disk(const std::string& path, const std::string& label);
  void close();  // UserError if HDF5 cannot finish the file
  hid_t id() const { return handle_.id(); }
  const std::string& path() const { return path_; }

 private:
  File(Handle h, std::string path, bool in_memory) : handle_(std::move(h)), path_(std::move(path)), in_memory_(in_memory) {}
  Handle handle_;
  std::string path_;
  bool in_memory_ = false;
};

enum class Kind { float32, float64, int32, uint8, other };
struct DatasetInfo {
  Shape shape;
  Kind kind = Kind::other;
  std::string type_name;  // e.g. "float64", "int64", "string"
};

bool exists(const File& f, const std::string& path);
// Whether `path` is a group (false if absent or a dataset).
bool is_group(const File& f, const std::string& path);
DatasetInfo info(const File& f, const std::string& path);
// Names of the links directly under a group (empty if it does not exist;
// UserError if it is not a group).
std::vector<std::string> list(const File& f, const std::string& group);
// Copies an object (a group with everything under it) from `src` to `dst`.
void copy(const File& src, const std::string& src_path, const File& dst, const std::string& dst_path);

void write(const File& f, const std::string& path, const std::vector<float>& data, const Shape& shape);
void write(const File& f, const std::string& path, const float* data, const Shape& shape);  // numel(shape) values
void write(const File& f, const std::string& path, const std::vector<double>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::int32_t>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::int64_t>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::uint8_t>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::string>& strings);  // fixed-length UTF-8
// Reads a dataset that must hold exactly this element kind.
std::vector<float> read_f32(const File& f, const std::string& path);
std::vector<double> read_f64(const File& f, const std::string& path);
std::vector<std::int32_t> read_i32(const File& f, const std::string& path);
std::vector<std::int64_t> read_i64(const File& f, const std::string& path);
std::vector<std::uint8_t> read_u8(const File& f, const std::string& path);
std::vector<std::string> read_strings(const File& f, const std::string& path);  // fixed-length
// A float64 scalar dataset (e.g. /loss).
double read_scalar_f64(const File& f, const std::string& path);

// Attributes on / (or on `object`, a group or dataset path). A read returns
// nothing if the attribute is absent, and throws UserError if it is not one
// value of the expected class.
void write_attr(const File& f, const std::string& name, const std::string& value, const std::string& object = "/");
void write_attr(const File& f, const std::string& name, std::int64_t value, const std::string& object = "/");
void write_attr(const File& f, const std::string& name, double value, const std::string& object = "/");
void create_group(const File& f, const std::string& path);
std::optional<std::string> read_attr_string(const File& f, const std::string& name, const std::string& object = "/");
std::optional<std::int64_t> read_attr_int(const File& f, const std::string& name, const std::string& object = "/");
std::optional<double> read_attr_double(const File& f, const std::string& name, const std::string& object = "/");

}  // namespace remat::h5
