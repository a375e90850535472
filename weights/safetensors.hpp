#pragma once
// The safetensors format (huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON naming each tensor's dtype, shape and
// byte range [begin, end) in the data that follows, then the data. Read by
// mapping the file: a tensor's bytes are read where they lie, widened to
// float32 into the caller's buffer, and let go, so a file of any size is
// read in the memory of its largest tensor. Nothing in a header is trusted
// before it is checked; every problem is one UserError naming the file.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autodiff/tensor.hpp"

namespace remat::hf {

struct StoredTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16" or "F16" (the ones remat reads)
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // bytes, relative to the data after the header
  std::int64_t numel() const { return remat::numel(shape); }
};

class SafetensorsFile {
 public:
  // Maps `path` and checks its header: the length within the file, JSON
  // with one entry per name (no duplicates), a known dtype, a shape whose
  // element count matches the byte range, ranges within the data, neither
  // overlapping nor leaving holes.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<StoredTensor>& tensors() const { return tensors_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StoredTensor* find(const std::string& name) const;
  std::uint64_t size() const { return size_; }

  // The tensor's values as float32 (F32 as stored; BF16 and F16 widened,
  // which is exact), into out[numel]. UserError naming the tensor and the
  // first index if a value is NaN or infinite. The tensor's pages are then
  // let go of (the file stays mapped; only this process's share of memory
  // shrinks).
  void read_f32(const StoredTensor& t, float* out) const;
  // The raw bytes [begin, end), for comparisons.
  const unsigned char* bytes(const StoredTensor& t) const;

 private:
  void release(const StoredTensor& t) const;
  std::string path_;
  int fd_ = -1;
  const unsigned char* map_ = nullptr;
  std::uint64_t size_ = 0, data_start_ = 0;
  std::vector<StoredTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: its name, shape, and how to produce its float32
// values (called once, when its turn comes, into a buffer of numel floats).
struct TensorToWrite {
  std::string name;
  Shape shape;
  std::function<void(float* out)> values;
};

// The dtypes a file can be written in: "F32", "BF16" (rounded to nearest
// even) or "F16" (rounded to nearest even; UserError for a value beyond
// its range). Anything else: UserError.
std::size_t dtype_bytes(const std::string& dtype);

// Writes `tensors` in that order as one safetensors file at `path`,
// atomically and a tensor at a time; `metadata` goes in the header's
// "__metadata__". UserError for a value F16 cannot hold (naming it) or a
// failed write; the previous file, if any, stays.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, const std::string& dtype,
                       const std::map<std::string, std::string>& metadata = {});

// Float conversions the format needs, exact where widening.
float bf16_to_f32(std::uint16_t v);
float f16_to_f32(std::uint16_t v);
std::uint16_t f32_to_bf16(float v);  // round to nearest even (NaN stays NaN)
std::uint16_t f32_to_f16(float v);   // round to nearest even; beyond its range: infinity

}  // namespace remat::hf
