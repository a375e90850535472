#pragma once
// A thin RAII layer over the HDF5 C API: handles that close themselves,
// typed array and attribute I/O, and errors that name the file and the
// object instead of HDF5's error stack.
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/tensor.hpp"

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
  // Throws UserError if the file is missing or not HDF5.
  static File open(const std::string& path, bool writable = false);
  static File create(const std::string& path);  // truncates
  hid_t id() const { return handle_.id(); }
  const std::string& path() const { return path_; }
  void flush() const;

 private:
  File(Handle h, std::string path) : handle_(std::move(h)), path_(std::move(path)) {}
  Handle handle_;
  std::string path_;
};

enum class Kind { float32, float64, int32, other };
struct DatasetInfo {
  Shape shape;
  Kind kind = Kind::other;
  std::string type_name;  // e.g. "float64", "int64", "string"
};

bool exists(const File& f, const std::string& path);
DatasetInfo info(const File& f, const std::string& path);
// Names of the datasets directly under a group (empty if it does not exist).
std::vector<std::string> list(const File& f, const std::string& group);

void write(const File& f, const std::string& path, const std::vector<float>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<double>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::int32_t>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::int64_t>& data, const Shape& shape);
void write(const File& f, const std::string& path, const std::vector<std::string>& strings);  // fixed-length UTF-8
// Reads a dataset that must hold exactly this element kind.
std::vector<float> read_f32(const File& f, const std::string& path);
std::vector<std::int32_t> read_i32(const File& f, const std::string& path);

// Attributes on / (or on `object`, a group or dataset path).
void write_attr(const File& f, const std::string& name, const std::string& value, const std::string& object = "/");
void write_attr(const File& f, const std::string& name, std::int64_t value, const std::string& object = "/");
void write_attr(const File& f, const std::string& name, double value, const std::string& object = "/");
void create_group(const File& f, const std::string& path);
std::optional<std::string> read_attr_string(const File& f, const std::string& name, const std::string& object = "/");
std::optional<std::int64_t> read_attr_int(const File& f, const std::string& name, const std::string& object = "/");
std::optional<double> read_attr_double(const File& f, const std::string& name, const std::string& object = "/");
std::vector<double> read_f64(const File& f, const std::string& path);
std::vector<std::int64_t> read_i64(const File& f, const std::string& path);
std::vector<std::string> read_strings(const File& f, const std::string& path);  // fixed-length

// Writes to a temporary name beside `path`, renamed over it by commit(); if
// never committed (an error, an exception) the temporary is removed, so a
// failed run leaves no half-written file.
class AtomicOutput {
 public:
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();
  const std::string& temp_path() const { return temp_; }
  void commit();

 private:
  std::string path_, temp_;
  bool committed_ = false;
};

}  // namespace remat::h5
