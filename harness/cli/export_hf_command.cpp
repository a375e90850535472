// remat export-hf: a weight file (and LoRA adapters) in Hugging Face's
// layout, for PyTorch: config.json and safetensors, PEFT's files for adapters.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "weights/hf_folder.hpp"
#include "weights/weights_file.hpp"
#include "core/error.hpp"
#include "finetune/adapters_file.hpp"
#include "h5/atomic_folder.hpp"
#include "harness/cli/commands.hpp"

namespace remat::cli {
namespace {

namespace fs = std::filesystem;

struct ExportHfOptions {
  std::string weights, adapters, out, dtype = "f32", max_shard_size = "5GB";
  bool force = false;
};

std::string stored_dtype(const std::string& name) {
  if (name == "f32" || name == "float32") return "F32";
  if (name == "bf16" || name == "bfloat16") return "BF16";
  if (name == "fp16" || name == "f16" || name == "float16") return "F16";
  throw UserError("--dtype '" + name + "': f32, bf16 or fp16");
}

// A folder that already holds a model folder is replaced only with --force,
// and never while it is what is being exported.
void check_folder(const ExportHfOptions& o) {
  std::error_code ec;
  for (const std::string& in : {o.weights, o.adapters}) {
    if (in.empty() || !fs::exists(in, ec)) continue;
    const fs::path folder = fs::weakly_canonical(o.out, ec), input = fs::weakly_canonical(in, ec);
    for (fs::path p = input; !p.empty(); p = p.parent_path()) {
      if (p == folder) throw UserError(o.out + ": holds an input of this export (" + in + "); give another --out");
      if (p == p.parent_path()) break;
    }
  }
  if (!fs::exists(o.out, ec)) return;
  if (!fs::is_directory(o.out, ec)) throw UserError(o.out + ": exists and is not a folder");
  if (o.force) return;
  for (const auto& entry : fs::directory_iterator(o.out, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "config.json" || name.rfind("model", 0) == 0 || name.rfind("adapter_", 0) == 0)
      throw UserError(o.out + ": already holds a model folder (" + name + "); give another --out, or --force to replace it");
  }
}

// What a replaced folder keeps: everything this export does not write (a
// tokenizer, a README), except the weight files of an older export when
// weights are written (its shards would be read beside the new ones).
bool kept_from_old_folder(const std::string& name, bool writing_weights) {
  const bool weight_file = name == "config.json" || name == "model.safetensors.index.json" ||
                           (name.rfind("model", 0) == 0 && name.size() > 12 &&
                            name.compare(name.size() - 12, 12, ".safetensors") == 0);
  return !(writing_weights && weight_file);
}

// A line every few seconds while shards are written.
class ExportProgress {
 public:
  void operator()(std::size_t done, std::size_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_).count() < 5) return;
    std::printf("  %zu of %zu tensors written (%.0f%%)\n", done, total, 100.0 * double(done) / double(total));
    std::fflush(stdout);
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

hf::ExportTensor tensor_of(const std::string& name, const Shape& shape, std::vector<float> values) {
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  return {name, shape, [data](float* out) { std::copy(data->begin(), data->end(), out); }};
}

void write_export(const ExportHfOptions& o, const hf::ExportOptions& options, const std::string& dtype,
                  AtomicFolder& folder);

void run_export_hf(const ExportHfOptions& o) {
  if (o.weights.empty() && o.adapters.empty()) throw UserError("give --weights, --adapters, or both");
  const std::string dtype = stored_dtype(o.dtype);
  hf::ExportOptions options;
  options.dtype = dtype;
  options.max_shard_bytes = hf::parse_shard_size(o.max_shard_size);
  options.progress = ExportProgress();
  check_folder(o);
  // Written beside the target and swapped in whole: a refusal, a full disk
  // or a kill leaves the old folder as it was (or none).
  AtomicFolder folder(o.out);
  try {
    write_export(o, options, dtype, folder);
  } catch (const UserError& e) {  // said of the folder the user named, and what became of it
    std::string what = e.what();
    for (std::size_t at; (at = what.find(folder.path())) != std::string::npos;)
      what.replace(at, folder.path().size(), folder.target());
    std::error_code ec;
    throw UserError(what + (fs::exists(folder.target(), ec) ? "; " + folder.target() + " is as it was" : "; nothing written"));
  }
}

void write_export(const ExportHfOptions& o, const hf::ExportOptions& options, const std::string& dtype,
                  AtomicFolder& folder) {
  std::vector<std::string> written;
  if (!o.weights.empty()) {
    const LoadedWeights w = load_weights(o.weights, o.force, /*skip_adapters=*/true);
    hf::family_of_model(w.setup);  // a model with a layout, before anything is written
    std::vector<hf::ExportTensor> tensors;
    std::size_t quantized = 0;
    for (std::size_t i = 0; i < w.params->names().size(); ++i) {
      const Tensor& t = w.params->tensors()[i];
      if (const QuantizedWeight* q = w.params->quantized(w.params->names()[i])) {
        // Hugging Face's files hold floats: a quantized weight (QLoRA's base) goes out dequantized.
        ++quantized;
        tensors.push_back({w.params->names()[i], q->shape, [q = *q](float* out) {
                             const auto v = dequantized(q, "export").to_host_f32();
                             std::copy(v.begin(), v.end(), out);
                           }});
        continue;
      }
      tensors.push_back({w.params->names()[i], t.shape(), [t](float* out) {
                           const auto v = t.to_host_f32();
                           std::copy(v.begin(), v.end(), out);
                         }});
    }
    for (const auto& f : hf::export_folder(w.setup, tensors, folder.path(), options)) written.push_back(f);
    if (quantized > 0)
      std::printf("%s: %zu quantized weights written dequantized (their values, not their bytes)\n",
                  o.weights.c_str(), quantized);
  }
  if (!o.adapters.empty()) {
    const AdapterFile a = read_adapters(o.adapters);
    hf::family_of_model(a.setup);
    std::vector<hf::ExportAdapter> adapters;
    for (const auto& weight : a.weights()) {
      const auto& A = a.params.at(weight + ".lora_A");
      const auto& B = a.params.at(weight + ".lora_B");
      adapters.push_back({weight, tensor_of(weight + ".lora_A", A.shape, A.data),
                          tensor_of(weight + ".lora_B", B.shape, B.data)});
    }
    const double alpha = a.options.alpha > 0 ? a.options.alpha : a.options.rank;
    for (const auto& f : hf::export_adapters(a.setup, adapters, a.options.rank, alpha, folder.path(), dtype))
      written.push_back(f);
  }
  const bool weights = !o.weights.empty();
  folder.commit([weights](const std::string& name) { return kept_from_old_folder(name, weights); });
  for (const auto& f : written)
    std::printf("wrote %s\n", (fs::path(folder.target()) / fs::path(f).filename()).string().c_str());
}

}  // namespace

void setup_export_hf(CLI::App& app) {
  auto o = std::make_shared<ExportHfOptions>();
  auto* cmd = app.add_subcommand("export-hf",
                                 "Write weights (gpt2, llama, mixtral) as a Hugging Face model folder, and LoRA adapters "
                                 "in PEFT's layout, for PyTorch");
  cmd->add_option("--weights", o->weights, "A weight file (or training run file, or Hugging Face model folder)");
  cmd->add_option("--adapters", o->adapters,
                  "LoRA adapters (an adapter file, or a --lora training run file): adapter_config.json and "
                  "adapter_model.safetensors");
  cmd->add_option("--out", o->out, "The folder to write into (created if needed)")->required();
  cmd->add_option("--dtype", o->dtype, "Stored precision: f32, bf16 or fp16 (rounded to nearest even)")
      ->capture_default_str();
  cmd->add_option("--max-shard-size", o->max_shard_size,
                  "Above this, model-0000k-of-0000n.safetensors with model.safetensors.index.json (5GB, 500MB, 2GiB)")
      ->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace a model folder already in the folder; skip the memory check");
  cmd->callback([o] { run_export_hf(*o); });
}

namespace {
const RegisterCommand register_export_hf(140, setup_export_hf);
}  // namespace

}  // namespace remat::cli
