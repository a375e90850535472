#include "weights/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "autodiff/dtype.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "h5/atomic_file.hpp"

namespace remat::hf {
namespace {

using Json = nlohmann::json;

std::uint64_t little_endian_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// The element count of `shape`, or nothing if it overflows 64 bits.
bool checked_numel(const Shape& shape, std::uint64_t& n) {
  n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / std::uint64_t(d)) return false;
    n *= std::uint64_t(d);
  }
  return true;
}

}  // namespace

// The conversions are the compute types' own (autodiff/bfloat16.hpp, float16.hpp).
float bf16_to_f32(std::uint16_t v) {
  bf16 b;
  b.bits = v;
  return float(b);
}
float f16_to_f32(std::uint16_t v) { return f16::widen(v); }
std::uint16_t f32_to_bf16(float v) { return bf16::round(v); }
std::uint16_t f32_to_f16(float v) { return f16::round(v); }

std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  throw UserError("dtype '" + dtype + "' is not one remat reads or writes (F32, BF16, F16)");
}

namespace {

// Throws UserError naming the file.
using Fail = std::function<void(const std::string& what)>;

// The JSON header, each top-level key once: a JSON parser keeps the last of
// duplicates, silently.
Json parse_header(const unsigned char* map, std::uint64_t n, const Fail& fail) {
  std::set<std::string> seen;
  std::string duplicate;
  const Json::parser_callback_t once = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  const char* h = reinterpret_cast<const char*>(map + 8);
  const Json header = Json::parse(h, h + n, once, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) fail("the header is not a JSON object");
  if (!duplicate.empty()) fail("tensor '" + duplicate + "' is named twice in the header");
  return header;
}

// One tensor's entry, checked: its dtype, shape and byte range, which must
// hold exactly its values and lie inside the data.
StoredTensor parse_entry(const std::string& name, const Json& entry, std::uint64_t data_size, const Fail& fail) {
  const std::string where = "tensor '" + name + "'";
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
    fail(where + " lacks dtype, shape or data_offsets");
  const Json &dtype = entry["dtype"], &shape = entry["shape"], &offsets = entry["data_offsets"];
  if (!dtype.is_string()) fail(where + ": dtype is not a string");
  StoredTensor t;
  t.name = name;
  t.dtype = dtype.get<std::string>();
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    fail(where + " has dtype " + t.dtype + ", not one remat reads (F32, BF16, F16)");
  if (!shape.is_array()) fail(where + ": shape is not a list");
  for (const auto& d : shape) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::uint64_t(1) << 40)
      fail(where + ": shape " + shape.dump() + " is not a list of sizes");
    t.shape.push_back(std::int64_t(d.get<std::uint64_t>()));
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(where + ": data_offsets " + offsets.dump() + " is not [begin, end]");
  t.begin = offsets[0].get<std::uint64_t>();
  t.end = offsets[1].get<std::uint64_t>();
  if (t.begin > t.end || t.end > data_size)
    fail(where + ": bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") lie outside the " +
         std::to_string(data_size) + " bytes of data");
  std::uint64_t count = 0;
  if (!checked_numel(t.shape, count) || count > (t.end - t.begin) || count * dtype_bytes(t.dtype) != t.end - t.begin)
    fail(where + ": " + t.dtype + " " + to_string(t.shape) + " needs " +
         (checked_numel(t.shape, count) ? std::to_string(count * dtype_bytes(t.dtype)) : std::string("too many")) +
         " bytes, its range holds " + std::to_string(t.end - t.begin));
  return t;
}

// The data is covered exactly: no overlap (two tensors reading the same
// bytes) and no hole (bytes no tensor accounts for).
void check_coverage(const std::vector<StoredTensor>& tensors, std::uint64_t data_size, const Fail& fail) {
  std::vector<const StoredTensor*> by_offset;
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const StoredTensor* a, const StoredTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  const StoredTensor* previous = nullptr;
  for (const StoredTensor* t : by_offset) {
    if (t->begin < covered)
      fail("tensors '" + previous->name + "' and '" + t->name + "' overlap (bytes from " + std::to_string(t->begin) + ")");
    if (t->begin > covered)
      fail("bytes [" + std::to_string(covered) + ", " + std::to_string(t->begin) + ") of the data belong to no tensor");
    covered = t->end;
    previous = t;
  }
  if (covered != data_size)
    fail("bytes [" + std::to_string(covered) + ", " + std::to_string(data_size) + ") of the data belong to no tensor");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) { throw UserError(path_ + ": " + what); };
  fd_ = open_regular_file(path, "a safetensors file");  // a FIFO or device refused, never waited on
  struct stat st {};
  ::fstat(fd_, &st);
  size_ = std::uint64_t(st.st_size);
  try {
    if (size_ < 8) fail("too short for a safetensors file (" + std::to_string(size_) + " bytes)");
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (m == MAP_FAILED) fail(std::string("cannot map (") + std::strerror(errno) + ")");
    map_ = static_cast<const unsigned char*>(m);
    const std::uint64_t n = little_endian_u64(map_);
    if (n > size_ - 8)
      fail("header length " + std::to_string(n) + " runs beyond the file (" + std::to_string(size_) + " bytes)");
    data_start_ = 8 + n;
    const Json header = parse_header(map_, n, fail);
    const std::uint64_t data_size = size_ - data_start_;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) fail("__metadata__ is not an object");
        for (const auto& [k, v] : entry.items())
          if (v.is_string()) metadata_[k] = v.get<std::string>();
        continue;
      }
      tensors_.push_back(parse_entry(name, entry, data_size, fail));
    }
    check_coverage(tensors_, data_size, fail);
    std::sort(tensors_.begin(), tensors_.end(), [](const StoredTensor& a, const StoredTensor& b) { return a.begin < b.begin; });
  } catch (...) {
    if (map_) ::munmap(const_cast<unsigned char*>(map_), size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const StoredTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const unsigned char* SafetensorsFile::bytes(const StoredTensor& t) const { return map_ + data_start_ + t.begin; }

void SafetensorsFile::read_f32(const StoredTensor& t, float* out) const {
  const unsigned char* p = bytes(t);
  const std::int64_t n = t.numel();
  {  // read ahead in large pieces: a fault per page costs more than the copy
    const long page = ::sysconf(_SC_PAGESIZE);
    const std::uint64_t first = (data_start_ + t.begin) / std::uint64_t(page) * std::uint64_t(page);
    if (data_start_ + t.end > first)
      ::madvise(const_cast<unsigned char*>(map_) + first, data_start_ + t.end - first, MADV_WILLNEED);
  }
  if (t.dtype == "F32") {
    std::memcpy(out, p, std::size_t(n) * 4);
  } else {
    const bool bf16 = t.dtype == "BF16";
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = bf16 ? bf16_to_f32(v) : f16_to_f32(v);
    }
  }
  release(t);
  // Judged by the bits (a signalling NaN compared as a float raises an
  // invalid-operation exception).
  std::int64_t bad = -1;
  std::uint32_t any = 0;  // a vectorised scan first; the index only if something is wrong
  const std::uint32_t* u = reinterpret_cast<const std::uint32_t*>(out);
  for (std::int64_t i = 0; i < n; ++i) any |= std::uint32_t((u[i] & 0x7f800000u) == 0x7f800000u);
  for (std::int64_t i = 0; any && i < n && bad < 0; ++i)
    if ((bits_of(out[i]) & 0x7f800000) == 0x7f800000) bad = i;
  if (bad >= 0)
    throw UserError(path_ + ": tensor '" + t.name + "' holds a non-finite value (" +
                    ((bits_of(out[bad]) & 0x7fffff) ? "nan" : (bits_of(out[bad]) >> 31) ? "-inf" : "inf") +
                    ") at index " + std::to_string(bad));
}

void SafetensorsFile::release(const StoredTensor& t) const {
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t first = (data_start_ + t.begin) / std::uint64_t(page) * std::uint64_t(page);
  const std::uint64_t last = data_start_ + t.end;
  if (last > first) ::madvise(const_cast<unsigned char*>(map_) + first, last - first, MADV_DONTNEED);
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, const std::string& dtype,
                       const std::map<std::string, std::string>& metadata) {
  const std::size_t width = dtype_bytes(dtype);
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = std::uint64_t(numel(t.shape)) * width;
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i));
  AtomicFile file(path, /*sweep=*/false);  // into a folder written whole (AtomicFolder)
  file.write(length, 8);
  file.write(text.data(), text.size());
  std::vector<float> values;
  std::vector<std::uint16_t> half;
  for (const auto& t : tensors) {
    const std::size_t n = std::size_t(numel(t.shape));
    values.assign(n, 0.f);
    t.values(values.data());
    if (width == 4) {
      file.write(values.data(), n * 4);
      continue;
    }
    half.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      half[i] = dtype == "BF16" ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      if (dtype == "F16" && std::isfinite(values[i]) && (half[i] & 0x7c00) == 0x7c00)
        throw UserError(path + ": '" + t.name + "' holds " + std::to_string(values[i]) + " at index " +
                        std::to_string(i) + ", beyond float16's range (65504); write it as BF16 or F32");
    }
    file.write(half.data(), n * 2);
  }
  file.commit();
}

}  // namespace remat::hf
