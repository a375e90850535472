#include "weights/hf_folder.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "core/error.hpp"
#include "core/files.hpp"
#include "h5/atomic_file.hpp"

namespace remat::hf {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// A config or an index is small (Llama 3 405B's index: about 100 KiB); a
// file far larger is not one, and is not read.
constexpr std::uint64_t kMaxJsonBytes = 64 << 20;

Json read_json(const std::string& path, const std::string& what) {
  const Json j = Json::parse(read_regular_file(path, kMaxJsonBytes, what), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw UserError(path + ": not JSON (" + what + ")");
  return j;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Shape reversed(Shape s) {
  std::reverse(s.begin(), s.end());
  return s;
}

// dst[c][r] = src[r][c] for src [rows, cols], in tiles that stay in cache
// (each tile's rows read once, its columns written contiguously).
void transpose(const float* src, float* dst, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const std::int64_t r1 = std::min(rows, r0 + kTile);
    for (std::int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const std::int64_t c1 = std::min(cols, c0 + kTile);
      for (std::int64_t c = c0; c < c1; ++c) {
        float* d = dst + c * rows;
        const float* s = src + c;
        for (std::int64_t r = r0; r < r1; ++r) d[r] = s[r * cols];
      }
    }
  }
}

std::string torch_dtype(const std::string& dtype) {
  return dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
}

// Into a folder being written whole (AtomicFolder): nothing of dead writers
// to sweep there, and thousands of shards stay linear.
void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  const std::string text = j.dump(2) + "\n";
  AtomicFile file(path, /*sweep=*/false);
  file.write(text.data(), text.size());
  file.commit();
}

// The metadata key of an export's id, in every shard and in the index.
constexpr const char* kExportId = "remat_export";

std::string new_export_id() {
  std::mt19937_64 random{std::random_device{}()};
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(random()));
  return id;
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || ends_with(path, ".safetensors");
}

namespace {

// Where a model's files are: config.json, the safetensors files, and the
// shards' index (if sharded).
struct Layout {
  std::string config_path, index_path;
  std::vector<std::string> names;  // safetensors files
  Json index;
};

// The shards an index lists, each a file name in the folder.
std::vector<std::string> shards_of(const std::string& path, const std::string& index_path, const Json& index) {
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw UserError(index_path + ": no 'weight_map' object");
  std::set<std::string> shards;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw UserError(index_path + ": tensor '" + tensor + "' maps to " + file.dump() + ", not a file name");
    const std::string f = file.get<std::string>();
    if (f.find('/') != std::string::npos || f == ".." || f.empty())
      throw UserError(index_path + ": '" + f + "' is not a file name in the folder");
    shards.insert(f);
  }
  std::vector<std::string> names;
  for (const auto& f : shards) names.push_back((fs::path(path) / f).string());
  return names;
}

Layout locate(const std::string& path, const std::string& config) {
  std::error_code ec;
  Layout l;
  l.config_path = config;
  if (fs::is_directory(path, ec)) {
    if (!config.empty()) throw UserError(path + ": a folder brings its own config.json; --config is for a single .safetensors file");
    l.config_path = (fs::path(path) / "config.json").string();
    if (!fs::exists(l.config_path, ec)) throw UserError(path + ": no config.json (a Hugging Face model folder has one)");
    if (fs::exists(fs::path(path) / kSingle, ec)) {
      l.names.push_back((fs::path(path) / kSingle).string());
    } else if (fs::exists(fs::path(path) / kIndex, ec)) {
      l.index_path = (fs::path(path) / kIndex).string();
      l.index = read_json(l.index_path, "the shards' index");
      l.names = shards_of(path, l.index_path, l.index);
    } else {
      throw UserError(path + ": neither " + kSingle + " nor " + kIndex + " (remat reads safetensors model folders)");
    }
  } else if (ends_with(path, ".safetensors")) {
    if (!fs::exists(path, ec)) throw UserError(path + ": no such file");
    if (l.config_path.empty()) {
      l.config_path = (fs::path(path).parent_path() / "config.json").string();
      if (!fs::exists(l.config_path, ec))
        throw UserError(path + ": no config.json beside it; name one with --config (remat import) or give the model folder");
    }
    l.names.push_back(path);
  } else {
    throw UserError(path + ": not a Hugging Face model folder (a folder with config.json, or a .safetensors file)");
  }
  return l;
}

}  // namespace

HfFolder::HfFolder(const std::string& path, const std::string& config) {
  const Layout layout = locate(path, config);
  config_path_ = layout.config_path;
  index_path_ = layout.index_path;
  const Json cfg = read_json(config_path_, "the model's configuration");
  family_ = &family_of_config(cfg, config_path_);
  setup_ = {family_->model(), "hf", family_->sizes(cfg, config_path_)};
  try {
    validate(setup_.sizes);
  } catch (const UserError& e) {
    throw UserError(config_path_ + ": " + e.what());
  }
  const Tensors all = open_files(layout.names);
  if (!index_path_.empty()) check_index(layout.index, all);
  map_parameters(path, all);
}

// Every tensor of every file, each name once.
HfFolder::Tensors HfFolder::open_files(const std::vector<std::string>& names) {
  std::error_code ec;
  Tensors all;
  for (const auto& name : names) {
    if (!fs::exists(name, ec)) throw UserError(index_path_ + ": lists " + fs::path(name).filename().string() + ", which is not in the folder");
    files_.push_back(std::make_unique<SafetensorsFile>(name));
    file_names_.push_back(name);
    for (const auto& t : files_.back()->tensors()) {
      const auto [it, fresh] = all.emplace(t.name, std::make_pair(files_.back().get(), &t));
      if (!fresh) throw UserError(name + ": tensor '" + t.name + "' is also in " + it->second.first->path());
    }
  }
  return all;
}

// The index and the shards agree, both ways; an index that names its
// export has every shard of that export.
void HfFolder::check_index(const Json& index, const Tensors& all) const {
  const std::string& index_path = index_path_;
  const Json& map = index["weight_map"];
  for (const auto& [tensor, file] : map.items()) {
    const auto it = all.find(tensor);
    if (it == all.end()) throw UserError(index_path + ": lists tensor '" + tensor + "', which no shard holds");
    if (fs::path(it->second.first->path()).filename() != file.get<std::string>())
      throw UserError(index_path + ": puts '" + tensor + "' in " + file.get<std::string>() + ", but it is in " +
                      fs::path(it->second.first->path()).filename().string());
  }
  for (const auto& [tensor, where] : all)
    if (!map.contains(tensor)) throw UserError(where.first->path() + ": tensor '" + tensor + "' is not in " + index_path);
  // An index that names its export: every shard is of that export.
  const Json& meta = index.contains("metadata") ? index["metadata"] : Json();
  if (meta.is_object() && meta.contains(kExportId)) {
    if (!meta[kExportId].is_string()) throw UserError(index_path + ": metadata '" + kExportId + "' is not a string");
    const std::string id = meta[kExportId].get<std::string>();
    for (const auto& f : files_) {
      const auto it = f->metadata().find(kExportId);
      if (it == f->metadata().end() || it->second != id)
        throw UserError(f->path() + ": is not of the export " + index_path + " lists (export " +
                        (it == f->metadata().end() ? std::string("unnamed") : it->second) + ", the index's " + id +
                        "): the folder mixes two exports; export it again");
    }
  }
}

// The model's parameters, each where the family puts it, of its shape; the
// rest must be the family's buffers (or a tied head equal to its embedding).
void HfFolder::map_parameters(const std::string& path, const Tensors& all) {
  specs_ = models().find(setup_.model).make(setup_.sizes)->params();
  bool prefixed = false;
  for (const auto& [name, where] : all) prefixed = prefixed || name.rfind("transformer.", 0) == 0;
  std::set<std::string> used;
  for (const auto& spec : specs_) {
    const HfTensor hf = family_->tensor(spec.name, prefixed);
    const auto it = all.find(hf.name);
    if (it == all.end())
      throw UserError(path + ": no tensor '" + hf.name + "' (remat's " + spec.name + ") in the model folder");
    const Shape want = hf.transposed ? reversed(spec.shape) : spec.shape;
    if (it->second.second->shape != want)
      throw UserError(it->second.first->path() + ": tensor '" + hf.name + "' is " + to_string(it->second.second->shape) +
                      ", config.json makes it " + to_string(want));
    used.insert(hf.name);
    sources_.push_back({it->second.first, it->second.second, hf.transposed});
  }
  for (const auto& [name, where] : all) {
    if (used.count(name)) continue;
    if (family_->buffer(name)) {
      ++buffers_;
      continue;
    }
    if (name == family_->tied_head()) {  // saved although tied: it must be the embedding itself
      const auto tied = all.find(family_->tied_to(prefixed));
      const StoredTensor &head = *where.second, &wte = *tied->second.second;
      const bool same = head.shape == wte.shape && head.dtype == wte.dtype &&
                        std::memcmp(where.first->bytes(head), tied->second.first->bytes(wte), head.end - head.begin) == 0;
      if (!same)
        throw UserError(where.first->path() + ": '" + name + "' differs from '" + tied->first + "': remat's " +
                        setup_.model + " ties its head to the token embedding (tie_word_embeddings)");
      ++buffers_;
      continue;
    }
    throw UserError(where.first->path() + ": tensor '" + name + "' is not a parameter of remat's " + setup_.model +
                    " (docs/models.md)");
  }
}

HfFolder::~HfFolder() = default;

std::vector<std::string> HfFolder::inputs() const {
  std::vector<std::string> all = file_names_;
  all.push_back(config_path_);
  if (!index_path_.empty()) all.push_back(index_path_);
  return all;
}

std::uint64_t HfFolder::bytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files_) n += f->size();
  return n;
}

void HfFolder::read(std::size_t i, float* out) const {
  const Source& s = sources_.at(i);
  if (!s.transposed) return s.file->read_f32(*s.tensor, out);
  const std::unique_ptr<float[]> stored(new float[std::size_t(s.tensor->numel())]);  // written over, not zeroed
  s.file->read_f32(*s.tensor, stored.get());
  transpose(stored.get(), out, s.tensor->shape[0], s.tensor->shape[1]);
}

std::int64_t parse_shard_size(const std::string& text) {
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  for (const auto& [name, s] : std::vector<std::pair<std::string, double>>{
           {"", 1}, {"B", 1}, {"KB", 1e3}, {"K", 1e3}, {"MB", 1e6}, {"M", 1e6}, {"GB", 1e9}, {"G", 1e9},
           {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}})
    if (unit == name) scale = s;
  if (used == 0 || scale == 0 || !(v > 0) || v * scale > 1e15)
    throw UserError("--max-shard-size '" + text + "' is not a size (5GB, 500MB, 2GiB, or a byte count)");
  return std::int64_t(v * scale);
}

namespace {

// The tensors under the family's names and layouts, in shards of at most
// max_shard_bytes (a bigger tensor alone in its own); `total`: their bytes.
std::vector<std::vector<TensorToWrite>> plan_shards(const HfFamily& family, const std::vector<ExportTensor>& tensors,
                                                    const ExportOptions& options, std::uint64_t& total) {
  const std::size_t width = dtype_bytes(options.dtype);
  std::vector<std::vector<TensorToWrite>> shards(1);
  std::uint64_t in_shard = 0;
  total = 0;
  for (const auto& t : tensors) {
    const HfTensor hf = family.tensor(t.name);
    const Shape shape = hf.transposed ? reversed(t.shape) : t.shape;
    const std::uint64_t bytes = std::uint64_t(numel(shape)) * width;
    if (!shards.back().empty() && in_shard + bytes > std::uint64_t(options.max_shard_bytes)) shards.emplace_back(), in_shard = 0;
    in_shard += bytes;
    total += bytes;
    std::function<void(float*)> values = t.values;
    if (hf.transposed)
      values = [values, rows = t.shape[0], cols = t.shape[1]](float* out) {
        std::vector<float> v(std::size_t(rows * cols));
        values(v.data());
        transpose(v.data(), out, rows, cols);
      };
    shards.back().push_back({hf.name, shape, values});
  }
  return shards;
}

// Sharded: the shards, then the index naming them; returns the files written.
std::vector<std::string> write_shards(const std::string& dir, const std::vector<std::vector<TensorToWrite>>& shards,
                                      const ExportOptions& options, const std::map<std::string, std::string>& metadata,
                                      std::uint64_t total, std::size_t tensor_count) {
  std::vector<std::string> written;
  std::size_t done = 0;
  // A std::map, not an ordered one: thousands of shards stay linear.
  Json weight_map = Json::object();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    const std::string file = (fs::path(dir) / name).string();
    write_safetensors(file, shards[k], options.dtype, metadata);
    written.push_back(file);
    for (const auto& t : shards[k]) weight_map[t.name] = name;
    done += shards[k].size();
    if (options.progress) options.progress(done, tensor_count);
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}, {kExportId, metadata.at(kExportId)}};
  index["weight_map"] = std::move(weight_map);
  const std::string file = (fs::path(dir) / kIndex).string();
  write_json(file, index);
  written.push_back(file);
  return written;
}

}  // namespace

std::vector<std::string> export_folder(const ModelSetup& setup, const std::vector<ExportTensor>& tensors,
                                           const std::string& dir, const ExportOptions& options) {
  const HfFamily& family = family_of_model(setup);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create the folder (" + ec.message() + ")");
  std::uint64_t total = 0;
  const auto shards = plan_shards(family, tensors, options, total);
  const std::int64_t free = free_bytes((fs::path(dir) / kSingle).string());
  if (free >= 0 && std::uint64_t(free) < total + (1 << 20))
    throw UserError(dir + ": " + std::to_string(total) + " bytes of weights to write, " + std::to_string(free) +
                    " free on its file system; nothing written");
  std::vector<std::string> written;
  // Every file of one export carries its id, so that a folder mixed from two
  // exports is refused on import (HfFolder), not read as one model.
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {kExportId, new_export_id()}};
  if (shards.size() == 1) {
    const std::string file = (fs::path(dir) / kSingle).string();
    write_safetensors(file, shards[0], options.dtype, metadata);
    written.push_back(file);
    fs::remove(fs::path(dir) / kIndex, ec);  // a single file now: an older index would point elsewhere
  } else {
    written = write_shards(dir, shards, options, metadata, total, tensors.size());
    fs::remove(fs::path(dir) / kSingle, ec);  // sharded now: a single file would be read instead of the shards
  }
  nlohmann::ordered_json config = family.config(setup.sizes);
  config["torch_dtype"] = torch_dtype(options.dtype);
  const std::string config_file = (fs::path(dir) / "config.json").string();
  write_json(config_file, config);
  written.push_back(config_file);
  return written;
}

std::vector<std::string> export_adapters(const ModelSetup& setup, const std::vector<ExportAdapter>& adapters,
                                         int rank, double alpha, const std::string& dir, const std::string& dtype) {
  const HfFamily& family = family_of_model(setup);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create the folder (" + ec.message() + ")");
  std::vector<TensorToWrite> tensors;
  std::set<std::string> targets;
  bool conv1d = false;
  for (const auto& a : adapters) {
    const std::string module = family.module(a.weight);
    targets.insert(module.substr(module.rfind('.') + 1));
    conv1d = conv1d || family.tensor(a.weight).transposed;
    tensors.push_back({"base_model.model." + module + ".lora_A.weight", a.a.shape, a.a.values});
    tensors.push_back({"base_model.model." + module + ".lora_B.weight", a.b.shape, a.b.values});
  }
  const std::string weights = (fs::path(dir) / "adapter_model.safetensors").string();
  write_safetensors(weights, tensors, dtype, {{"format", "pt"}});
  nlohmann::ordered_json config = {{"peft_type", "LORA"},
                                   {"task_type", "CAUSAL_LM"},
                                   {"base_model_name_or_path", nullptr},
                                   {"r", rank},
                                   {"lora_alpha", alpha},
                                   {"lora_dropout", 0.0},
                                   {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                                   {"bias", "none"},
                                   {"fan_in_fan_out", conv1d},  // GPT-2's Conv1D stores its weight [in, out]
                                   {"inference_mode", true},
                                   {"modules_to_save", nullptr}};
  const std::string config_file = (fs::path(dir) / "adapter_config.json").string();
  write_json(config_file, config);
  return {weights, config_file};
}

}  // namespace remat::hf
