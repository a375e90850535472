#include "h5/h5.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "autodiff/error.hpp"

namespace remat::h5 {
namespace {

// HDF5 prints its error stack by default; we report our own one-line errors.
struct Silence {
  Silence() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
void silence() { static Silence once; }

[[noreturn]] void fail(const File& f, const std::string& what) {
  throw UserError(f.path() + ": " + what);
}

hid_t check(hid_t id, const File& f, const std::string& what) {
  if (id < 0) fail(f, what);
  return id;
}

void check_status(herr_t s, const File& f, const std::string& what) {
  if (s < 0) fail(f, what);
}

Kind kind_of(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT && size == 4) return Kind::float32;
  if (cls == H5T_FLOAT && size == 8) return Kind::float64;
  if (cls == H5T_INTEGER && size == 4 && H5Tget_sign(type) == H5T_SGN_2) return Kind::int32;
  return Kind::other;
}

std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = H5Tget_size(type) * 8;
  switch (cls) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER: return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING: return "string";
    default: return "non-numeric";
  }
}

template <class T>
void write_array(const File& f, const std::string& path, const std::vector<T>& data, const Shape& shape, hid_t mem,
                 hid_t file_type) {
  if (std::int64_t(data.size()) != numel(shape)) fail(f, "internal: size mismatch writing " + path);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), f, "cannot make dataspace"), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle ds(check(H5Dcreate2(f.id(), path.c_str(), file_type, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT), f,
                  "cannot create " + path),
            H5Dclose);
  if (!data.empty()) check_status(H5Dwrite(ds.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), f, "cannot write " + path);
}

template <class T>
std::vector<T> read_array(const File& f, const std::string& path, Kind want, hid_t mem, const char* want_name) {
  const DatasetInfo di = info(f, path);
  if (di.kind != want) fail(f, path + " holds " + di.type_name + ", expected " + want_name);
  std::vector<T> out(std::size_t(numel(di.shape)));
  Handle ds(check(H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT), f, "cannot open " + path), H5Dclose);
  if (!out.empty())
    check_status(H5Dread(ds.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), f,
                 "cannot read " + path + " (truncated or corrupt file?)");
  return out;
}

Handle open_attr(const File& f, const std::string& name, const std::string& object) {
  if (H5Aexists_by_name(f.id(), object.c_str(), name.c_str(), H5P_DEFAULT) <= 0) return {};
  return Handle(check(H5Aopen_by_name(f.id(), object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), f,
                      "cannot open attribute " + name),
                H5Aclose);
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

File File::open(const std::string& path, bool writable) {
  silence();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UserError(path + ": no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw UserError(path + ": not an HDF5 file");
  hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw UserError(path + ": cannot open (truncated or corrupt HDF5 file?)");
  return File(Handle(id, H5Fclose), path);
}

File File::create(const std::string& path) {
  silence();
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw UserError(path + ": cannot create file");
  return File(Handle(id, H5Fclose), path);
}

void File::flush() const { check_status(H5Fflush(id(), H5F_SCOPE_GLOBAL), *this, "cannot flush"); }

bool exists(const File& f, const std::string& path) {
  // Check each link along the path: H5Lexists fails on a missing parent.
  std::string prefix;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    prefix = path.substr(0, end);
    if (H5Lexists(f.id(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    start = end + 1;
  }
  return true;
}

DatasetInfo info(const File& f, const std::string& path) {
  if (!exists(f, path)) fail(f, "no dataset " + path);
  Handle ds(check(H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT), f, path + " is not a dataset"), H5Dclose);
  Handle type(check(H5Dget_type(ds.id()), f, "cannot read the type of " + path), H5Tclose);
  Handle space(check(H5Dget_space(ds.id()), f, "cannot read the shape of " + path), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) fail(f, "cannot read the shape of " + path);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  DatasetInfo di;
  di.shape.assign(dims.begin(), dims.end());
  di.kind = kind_of(type.id());
  di.type_name = type_name(type.id());
  return di;
}

std::vector<std::string> list(const File& f, const std::string& group) {
  std::vector<std::string> names;
  if (!exists(f, group)) return names;
  Handle g(check(H5Gopen2(f.id(), group.c_str(), H5P_DEFAULT), f, group + " is not a group"), H5Gclose);
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  check_status(H5Literate(g.id(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &names), f, "cannot list " + group);
  return names;
}

void write(const File& f, const std::string& path, const std::vector<float>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
}
void write(const File& f, const std::string& path, const std::vector<double>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE);
}
void write(const File& f, const std::string& path, const std::vector<std::int32_t>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_INT32, H5T_STD_I32LE);
}

std::vector<float> read_f32(const File& f, const std::string& path) {
  return read_array<float>(f, path, Kind::float32, H5T_NATIVE_FLOAT, "float32");
}
std::vector<std::int32_t> read_i32(const File& f, const std::string& path) {
  return read_array<std::int32_t>(f, path, Kind::int32, H5T_NATIVE_INT32, "int32");
}

namespace {

template <class F>
void with_attribute(const File& f, const std::string& object, const std::string& name, hid_t file_type, F&& write) {
  Handle o(check(H5Oopen(f.id(), object.c_str(), H5P_DEFAULT), f, "no object " + object), H5Oclose);
  if (H5Aexists(o.id(), name.c_str()) > 0) H5Adelete(o.id(), name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(check(H5Acreate2(o.id(), name.c_str(), file_type, space.id(), H5P_DEFAULT, H5P_DEFAULT), f,
                 "cannot create attribute " + name + " on " + object),
           H5Aclose);
  check_status(write(a.id()), f, "cannot write attribute " + name + " on " + object);
}

Handle string_type(std::size_t size) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), size == 0 ? 1 : size);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  return type;
}

}  // namespace

void write_attr(const File& f, const std::string& name, const std::string& value, const std::string& object) {
  Handle type = string_type(value.size());
  with_attribute(f, object, name, type.id(), [&](hid_t a) { return H5Awrite(a, type.id(), value.c_str()); });
}

void write_attr(const File& f, const std::string& name, std::int64_t value, const std::string& object) {
  with_attribute(f, object, name, H5T_STD_I64LE, [&](hid_t a) { return H5Awrite(a, H5T_NATIVE_INT64, &value); });
}

void write_attr(const File& f, const std::string& name, double value, const std::string& object) {
  with_attribute(f, object, name, H5T_IEEE_F64LE, [&](hid_t a) { return H5Awrite(a, H5T_NATIVE_DOUBLE, &value); });
}

void create_group(const File& f, const std::string& path) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle g(check(H5Gcreate2(f.id(), path.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT), f, "cannot create " + path),
           H5Gclose);
}

void write(const File& f, const std::string& path, const std::vector<std::string>& strings) {
  std::size_t width = 1;
  for (const auto& x : strings) width = std::max(width, x.size());
  std::vector<char> buf(strings.size() * width, '\0');
  for (std::size_t i = 0; i < strings.size(); ++i) std::memcpy(buf.data() + i * width, strings[i].data(), strings[i].size());
  Handle type = string_type(width);
  hsize_t n = strings.size();
  Handle space(check(H5Screate_simple(1, &n, nullptr), f, "cannot make dataspace"), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle ds(check(H5Dcreate2(f.id(), path.c_str(), type.id(), space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT), f,
                  "cannot create " + path),
            H5Dclose);
  if (n) check_status(H5Dwrite(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), f, "cannot write " + path);
}

void write(const File& f, const std::string& path, const std::vector<std::int64_t>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_INT64, H5T_STD_I64LE);
}

std::optional<std::string> read_attr_string(const File& f, const std::string& name, const std::string& object) {
  Handle a = open_attr(f, name, object);
  if (!a.valid()) return std::nullopt;
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING) fail(f, "attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type.id()) > 0) {  // as h5py writes them
    char* s = nullptr;
    Handle mem(H5Tget_native_type(type.id(), H5T_DIR_DEFAULT), H5Tclose);
    check_status(H5Aread(a.id(), mem.id(), &s), f, "cannot read attribute " + name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string out(H5Tget_size(type.id()), '\0');
  check_status(H5Aread(a.id(), type.id(), out.data()), f, "cannot read attribute " + name);
  out.resize(std::strlen(out.c_str()));
  return out;
}

std::optional<std::int64_t> read_attr_int(const File& f, const std::string& name, const std::string& object) {
  Handle a = open_attr(f, name, object);
  if (!a.valid()) return std::nullopt;
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_INTEGER) fail(f, "attribute '" + name + "' is not an integer");
  std::int64_t v = 0;
  check_status(H5Aread(a.id(), H5T_NATIVE_INT64, &v), f, "cannot read attribute " + name);
  return v;
}

std::optional<double> read_attr_double(const File& f, const std::string& name, const std::string& object) {
  Handle a = open_attr(f, name, object);
  if (!a.valid()) return std::nullopt;
  double v = 0;
  check_status(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v), f, "cannot read attribute " + name);
  return v;
}

std::vector<double> read_f64(const File& f, const std::string& path) {
  return read_array<double>(f, path, Kind::float64, H5T_NATIVE_DOUBLE, "float64");
}

std::vector<std::int64_t> read_i64(const File& f, const std::string& path) {
  const DatasetInfo di = info(f, path);
  if (di.type_name != "int64") fail(f, path + " holds " + di.type_name + ", expected int64");
  std::vector<std::int64_t> out(std::size_t(numel(di.shape)));
  Handle ds(check(H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT), f, "cannot open " + path), H5Dclose);
  if (!out.empty())
    check_status(H5Dread(ds.id(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), f, "cannot read " + path);
  return out;
}

std::vector<std::string> read_strings(const File& f, const std::string& path) {
  Handle ds(check(H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT), f, "cannot open " + path), H5Dclose);
  Handle type(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING || H5Tis_variable_str(type.id()) > 0)
    fail(f, path + " is not an array of fixed-length strings");
  const std::size_t width = H5Tget_size(type.id());
  const std::size_t n = std::size_t(numel(info(f, path).shape));
  std::vector<char> buf(n * width);
  if (n) check_status(H5Dread(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), f, "cannot read " + path);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.emplace_back(buf.data() + i * width, strnlen(buf.data() + i * width, width));
  return out;
}

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)), temp_(path_ + ".partial") {}

AtomicOutput::~AtomicOutput() {
  if (!committed_) std::remove(temp_.c_str());
}

void AtomicOutput::commit() {
  std::error_code ec;
  std::filesystem::rename(temp_, path_, ec);
  if (ec) throw UserError(path_ + ": cannot write (" + ec.message() + ")");
  committed_ = true;
}

}  // namespace remat::h5
