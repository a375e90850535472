#pragma once
// Hugging Face model folders in and out: a folder with config.json and
// model.safetensors (or shards listed in model.safetensors.index.json), or
// one .safetensors file with a config.json. Reading checks everything before
// a byte of weight is used: the config (hf_family.hpp), every file's header
// (safetensors.hpp), the index against the shards, and that the tensors are
// exactly the model's parameters (plus the family's known buffers), each of
// its shape. Values are read a tensor at a time, so a model folder of any size
// is imported in the memory of its largest tensor.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <string>
#include <vector>

#include "weights/hf_family.hpp"
#include "weights/safetensors.hpp"
#include "zoo/model.hpp"

namespace remat::hf {

// Whether a path given as weights is a Hugging Face model folder (a folder, or
// a .safetensors file) rather than a remat HDF5 file.
bool is_hf_folder(const std::string& path);

class HfFolder {
 public:
  // `config`: a config.json for a single .safetensors file ("": the one
  // beside it). UserError for anything wrong, naming the file and the key,
  // tensor or byte range.
  explicit HfFolder(const std::string& path, const std::string& config = "");
  ~HfFolder();

  const ModelSetup& setup() const { return setup_; }
  const HfFamily& family() const { return *family_; }
  const std::vector<std::string>& files() const { return file_names_; }  // the safetensors files
  // Every file read: config.json, the index (if sharded) and the shards; an
  // output must be none of them.
  std::vector<std::string> inputs() const;
  std::uint64_t bytes() const;  // of the safetensors files
  // The model's parameters in its order, with their shapes.
  const std::vector<ParamSpec>& params() const { return specs_; }
  // Parameter `i`'s values, as remat lays them out ([out, in]), float32,
  // into out[numel]. UserError for a non-finite value.
  void read(std::size_t i, float* out) const;
  // The number of tensors that were skipped as the family's buffers.
  std::size_t buffers_skipped() const { return buffers_; }

 private:
  struct Source {
    const SafetensorsFile* file;
    const StoredTensor* tensor;
    bool transposed;
  };
  // Every tensor of every file by name, with the file that holds it.
  using Tensors = std::map<std::string, std::pair<const SafetensorsFile*, const StoredTensor*>>;
  Tensors open_files(const std::vector<std::string>& names);
  void check_index(const nlohmann::json& index, const Tensors& all) const;
  void map_parameters(const std::string& path, const Tensors& all);
  ModelSetup setup_;
  const HfFamily* family_ = nullptr;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::string> file_names_;
  std::string config_path_, index_path_;
  std::vector<ParamSpec> specs_;
  std::vector<Source> sources_;  // by parameter
  std::size_t buffers_ = 0;
};

// Writing. A tensor's values are asked for when its turn comes.
struct ExportTensor {
  std::string name;  // remat's
  Shape shape;       // remat's
  std::function<void(float* out)> values;
};

struct ExportOptions {
  std::string dtype = "F32";  // F32, BF16 or F16
  std::int64_t max_shard_bytes = 5'000'000'000;  // above: model-0000k-of-0000n.safetensors and an index
  // Called after each shard with the tensors written so far and their count.
  std::function<void(std::size_t done, std::size_t total)> progress;
};

// Writes config.json and the weights in the family's layout into `dir`
// (created if needed); returns the files written. Each file is replaced
// atomically; a folder is replaced as one unit by writing into an
// AtomicFolder's staging folder (h5/atomic_folder.hpp). Every file carries
// one id of this export in its metadata ("remat_export"), which import
// checks across the shards and the index.
std::vector<std::string> export_folder(const ModelSetup& setup, const std::vector<ExportTensor>& tensors,
                                           const std::string& dir, const ExportOptions& options);

// LoRA adapters in PEFT's layout: adapter_config.json and
// adapter_model.safetensors, "base_model.model.<module>.lora_A.weight"
// [R, in] and ".lora_B.weight" [out, R].
struct ExportAdapter {
  std::string weight;  // remat's name of the adapted weight
  ExportTensor a, b;   // [R, in], [out, R]
};
std::vector<std::string> export_adapters(const ModelSetup& setup, const std::vector<ExportAdapter>& adapters,
                                         int rank, double alpha, const std::string& dir, const std::string& dtype);

// "5GB", "500MB", "1.5G", or a byte count, in decimal units (as Hugging
// Face's max_shard_size); UserError otherwise.
std::int64_t parse_shard_size(const std::string& text);

}  // namespace remat::hf
