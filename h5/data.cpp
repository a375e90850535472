// Datasets and attributes: typed reads that check the file's claims first.
#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "h5/h5.hpp"

namespace remat::h5 {
namespace {

// No single dataset or attribute remat reads is anywhere near this; a file
// claiming more is damaged or hostile, and is refused before allocating.
constexpr std::uint64_t kMaxReadBytes = std::uint64_t(1) << 36;

[[noreturn]] void fail(const File& f, const std::string& what) { throw UserError(f.path() + ": " + what); }

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
  if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(type) == H5T_SGN_NONE) return Kind::uint8;
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

Shape shape_of(hid_t space, const File& f, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail(f, "cannot read the shape of " + what);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  Shape shape;
  std::uint64_t n = 1;
  for (hsize_t d : dims) {
    if (d > hsize_t(INT64_MAX) || (d && n > kMaxReadBytes / d)) fail(f, what + " claims an impossible size");
    n *= d;
    shape.push_back(std::int64_t(d));
  }
  return shape;
}

Handle open_dataset(const File& f, const std::string& path) {
  if (!exists(f, path)) fail(f, "no dataset " + path);
  H5O_info_t oi;
  if (H5Oget_info_by_name(f.id(), path.c_str(), &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET)
    fail(f, path + " is not a dataset");
  return Handle(check(H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT), f, "cannot open " + path), H5Dclose);
}

void check_read_size(const File& f, const std::string& path, std::int64_t n, std::size_t element) {
  if (std::uint64_t(n) > kMaxReadBytes / element) fail(f, path + " is too large to read (" + std::to_string(n) + " elements)");
}

void write_raw(const File& f, const std::string& path, const void* data, const Shape& shape, hid_t mem,
               hid_t file_type) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), f, "cannot make dataspace"), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle ds(check(H5Dcreate2(f.id(), path.c_str(), file_type, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT), f,
                  "cannot create " + path),
            H5Dclose);
  if (numel(shape) > 0) check_status(H5Dwrite(ds.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), f, "cannot write " + path);
}

template <class T>
void write_array(const File& f, const std::string& path, const std::vector<T>& data, const Shape& shape, hid_t mem,
                 hid_t file_type) {
  if (std::int64_t(data.size()) != numel(shape)) throw std::logic_error("h5: size mismatch writing " + path);
  write_raw(f, path, data.data(), shape, mem, file_type);
}

template <class T>
std::vector<T> read_array(const File& f, const std::string& path, hid_t mem, const char* want_name) {
  const DatasetInfo di = info(f, path);
  if (di.type_name != want_name) fail(f, path + " holds " + di.type_name + ", expected " + want_name);
  const std::int64_t n = numel(di.shape);
  check_read_size(f, path, n, sizeof(T));
  std::vector<T> out(static_cast<std::size_t>(n));
  Handle ds = open_dataset(f, path);
  if (!out.empty())
    check_status(H5Dread(ds.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), f,
                 "cannot read " + path + " (truncated or corrupt file?)");
  return out;
}

// An attribute that must hold exactly one value of class `cls`; an invalid
// handle if it is absent.
Handle open_scalar_attr(const File& f, const std::string& name, const std::string& object, H5T_class_t cls,
                        const char* what, H5T_class_t also = H5T_NO_CLASS) {
  if (!exists(f, object)) fail(f, "no object " + object);
  const htri_t present = H5Aexists_by_name(f.id(), object.c_str(), name.c_str(), H5P_DEFAULT);
  if (present < 0) fail(f, "cannot read the attributes of " + object);
  if (present == 0) return {};
  Handle a(check(H5Aopen_by_name(f.id(), object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), f,
                 "cannot open attribute " + name),
           H5Aclose);
  const std::string where = "attribute '" + name + "'" + (object == "/" ? "" : " of " + object);
  Handle space(check(H5Aget_space(a.id()), f, "cannot read " + where), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.id()) != 1) fail(f, where + " must be a single value, not an array");
  Handle type(check(H5Aget_type(a.id()), f, "cannot read " + where), H5Tclose);
  const H5T_class_t held = H5Tget_class(type.id());
  if (held != cls && held != also) fail(f, where + " must be " + what + ", holds " + type_name(type.id()));
  return a;
}

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

bool exists(const File& f, const std::string& path) {
  // Check each link along the path: H5Lexists fails on a missing parent.
  if (path == "/") return true;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (H5Lexists(f.id(), path.substr(0, end).c_str(), H5P_DEFAULT) <= 0) return false;
    start = end + 1;
  }
  return true;
}

bool is_group(const File& f, const std::string& path) {
  if (!exists(f, path)) return false;
  H5O_info_t oi;
  return H5Oget_info_by_name(f.id(), path.c_str(), &oi, H5P_DEFAULT) >= 0 && oi.type == H5O_TYPE_GROUP;
}

DatasetInfo info(const File& f, const std::string& path) {
  Handle ds = open_dataset(f, path);
  Handle type(check(H5Dget_type(ds.id()), f, "cannot read the type of " + path), H5Tclose);
  Handle space(check(H5Dget_space(ds.id()), f, "cannot read the shape of " + path), H5Sclose);
  DatasetInfo di;
  di.shape = shape_of(space.id(), f, path);
  di.kind = kind_of(type.id());
  di.type_name = type_name(type.id());
  return di;
}

std::vector<std::string> list(const File& f, const std::string& group) {
  std::vector<std::string> names;
  if (!exists(f, group)) return names;
  if (!is_group(f, group)) fail(f, group + " is not a group");
  Handle g(check(H5Gopen2(f.id(), group.c_str(), H5P_DEFAULT), f, "cannot open " + group), H5Gclose);
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
void write(const File& f, const std::string& path, const float* d, const Shape& s) {
  write_raw(f, path, d, s, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
}
void write(const File& f, const std::string& path, const std::vector<double>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE);
}
void write(const File& f, const std::string& path, const std::vector<std::int32_t>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_INT32, H5T_STD_I32LE);
}
void write(const File& f, const std::string& path, const std::vector<std::int64_t>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_INT64, H5T_STD_I64LE);
}
void write(const File& f, const std::string& path, const std::vector<std::uint8_t>& d, const Shape& s) {
  write_array(f, path, d, s, H5T_NATIVE_UINT8, H5T_STD_U8LE);
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

std::vector<float> read_f32(const File& f, const std::string& path) {
  return read_array<float>(f, path, H5T_NATIVE_FLOAT, "float32");
}
std::vector<double> read_f64(const File& f, const std::string& path) {
  return read_array<double>(f, path, H5T_NATIVE_DOUBLE, "float64");
}
std::vector<std::int32_t> read_i32(const File& f, const std::string& path) {
  return read_array<std::int32_t>(f, path, H5T_NATIVE_INT32, "int32");
}
std::vector<std::int64_t> read_i64(const File& f, const std::string& path) {
  return read_array<std::int64_t>(f, path, H5T_NATIVE_INT64, "int64");
}
std::vector<std::uint8_t> read_u8(const File& f, const std::string& path) {
  return read_array<std::uint8_t>(f, path, H5T_NATIVE_UINT8, "uint8");
}

double read_scalar_f64(const File& f, const std::string& path) {
  const DatasetInfo di = info(f, path);
  if (di.kind != Kind::float64 || numel(di.shape) != 1) fail(f, path + " must be one float64 value");
  return read_f64(f, path).front();
}

std::vector<std::string> read_strings(const File& f, const std::string& path) {
  const DatasetInfo di = info(f, path);
  Handle ds = open_dataset(f, path);
  Handle type(check(H5Dget_type(ds.id()), f, "cannot read the type of " + path), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING || H5Tis_variable_str(type.id()) > 0 || di.shape.size() != 1)
    fail(f, path + " is not a list of fixed-length strings");
  const std::size_t width = H5Tget_size(type.id());
  const std::int64_t n = di.shape[0];
  check_read_size(f, path, n, std::max<std::size_t>(width, 1));
  std::vector<char> buf(std::size_t(n) * width);
  if (n) check_status(H5Dread(ds.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), f, "cannot read " + path);
  std::vector<std::string> out;
  for (std::int64_t i = 0; i < n; ++i) out.emplace_back(buf.data() + i * width, strnlen(buf.data() + i * width, width));
  return out;
}

// Variable-length UTF-8, as h5py writes strings itself: h5py hands such an
// attribute back as a str ('gpt2'), a fixed-length one as bytes (b'gpt2').
// Files written before read the same (read_attr_string takes both).
void write_attr(const File& f, const std::string& name, const std::string& value, const std::string& object) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), H5T_VARIABLE);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  const char* text = value.c_str();
  with_attribute(f, object, name, type.id(), [&](hid_t a) { return H5Awrite(a, type.id(), &text); });
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

std::optional<std::string> read_attr_string(const File& f, const std::string& name, const std::string& object) {
  Handle a = open_scalar_attr(f, name, object, H5T_STRING, "a string");
  if (!a.valid()) return std::nullopt;
  Handle type(check(H5Aget_type(a.id()), f, "cannot read attribute " + name), H5Tclose);
  if (H5Tis_variable_str(type.id()) > 0) {  // as h5py writes them
    char* s = nullptr;
    Handle mem(H5Tget_native_type(type.id(), H5T_DIR_DEFAULT), H5Tclose);
    check_status(H5Aread(a.id(), mem.id(), &s), f, "cannot read attribute " + name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  const std::size_t size = H5Tget_size(type.id());
  if (size == 0 || size > (1 << 20)) fail(f, "attribute '" + name + "' is not a readable string");
  std::string out(size, '\0');
  check_status(H5Aread(a.id(), type.id(), out.data()), f, "cannot read attribute " + name);
  out.resize(strnlen(out.data(), out.size()));
  return out;
}

std::optional<std::int64_t> read_attr_int(const File& f, const std::string& name, const std::string& object) {
  Handle a = open_scalar_attr(f, name, object, H5T_INTEGER, "an integer");
  if (!a.valid()) return std::nullopt;
  std::int64_t v = 0;
  // HDF5 converts any integer width to int64; an unsigned value beyond
  // int64's range would clip, so it is refused.
  Handle type(check(H5Aget_type(a.id()), f, "cannot read attribute " + name), H5Tclose);
  if (H5Tget_sign(type.id()) == H5T_SGN_NONE && H5Tget_size(type.id()) >= 8) {
    std::uint64_t u = 0;
    check_status(H5Aread(a.id(), H5T_NATIVE_UINT64, &u), f, "cannot read attribute " + name);
    if (u > std::uint64_t(INT64_MAX)) fail(f, "attribute '" + name + "' is out of range");
    return std::int64_t(u);
  }
  check_status(H5Aread(a.id(), H5T_NATIVE_INT64, &v), f, "cannot read attribute " + name);
  return v;
}

std::optional<double> read_attr_double(const File& f, const std::string& name, const std::string& object) {
  Handle a = open_scalar_attr(f, name, object, H5T_FLOAT, "a number", H5T_INTEGER);
  if (!a.valid()) return std::nullopt;
  double v = 0;
  check_status(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v), f, "cannot read attribute " + name);
  return v;
}

}  // namespace remat::h5
