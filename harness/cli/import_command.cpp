// remat import: a Hugging Face model folder (config.json + safetensors) into
// a remat weight file (docs/models.md), a tensor at a time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "weights/hf_folder.hpp"
#include "weights/weights_file.hpp"
#include "core/error.hpp"
#include "finetune/quantize.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/io/output_guard.hpp"

namespace remat::cli {
namespace {

struct ImportOptions {
  std::string path, config, out;
  QuantFormat quantize = QuantFormat::none;
  bool force = false;
};

// Per parameter, the format to store it in: --quantize for the weights only
// linear layers read, float32 for the rest.
std::vector<QuantFormat> formats_for(const ModelSetup& setup, const std::vector<ParamSpec>& specs, QuantFormat f) {
  if (f == QuantFormat::none) return {};
  const std::vector<std::string> linear = linear_weight_names(setup);
  std::vector<QuantFormat> out;
  for (const auto& s : specs) {
    const bool quantize = std::find(linear.begin(), linear.end(), s.name) != linear.end();
    if (quantize) require_whole_blocks(s.name, s.shape, f);
    out.push_back(quantize ? f : QuantFormat::none);
  }
  return out;
}

void run_import(const ImportOptions& o) {
  const hf::HfFolder c(o.path, o.config);  // every check that needs no weight value, now
  check_output(o.out, FileKind::weights, c.inputs(), o.force);
  const ModelSetup& setup = c.setup();
  const Sizes& z = setup.sizes;
  std::printf("%s: %s (%s), L %d, D %d, H %d, Hkv %d, F %d, V %d, S_max %d%s, from %zu file%s\n", o.path.c_str(),
              setup.model.c_str(), c.family().architecture().c_str(), z.L, z.D, z.H, z.Hkv, z.F, z.V, z.S_max,
              setup.model == "mixtral" ? (", E " + std::to_string(z.E) + ", K " + std::to_string(z.K)).c_str() : "",
              c.files().size(), c.files().size() == 1 ? "" : "s");
  // Progress for model folders that take a while: a line every few seconds.
  const double total = double(c.bytes());
  double done = 0;
  auto last = std::chrono::steady_clock::now();
  std::int64_t count = 0;
  const std::vector<QuantFormat> formats = formats_for(setup, c.params(), o.quantize);
  write_weights_streaming(o.out, setup, c.params(), [&](std::size_t i, float* values) {
    c.read(i, values);
    const std::int64_t n = numel(c.params()[i].shape);
    count += n;
    done += 4.0 * double(n);
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last).count() > 5) {
      std::printf("  %zu of %zu tensors (%.0f%%)\n", i + 1, c.params().size(), 100.0 * std::min(1.0, done / total));
      std::fflush(stdout);
      last = now;
    }
  }, formats);
  std::printf("wrote %s: %lld parameters in %zu tensors", o.out.c_str(), static_cast<long long>(count),
              c.params().size());
  if (o.quantize != QuantFormat::none)
    std::printf("; %zu linear weights in %s (frozen wherever the file is used: fine-tune it with --lora)",
                std::size_t(std::count(formats.begin(), formats.end(), o.quantize)), quant_format_name(o.quantize));
  if (c.buffers_skipped() > 0)
    std::printf("; skipped %zu tensors that are not parameters (%s's buffers, a tied head)", c.buffers_skipped(),
                c.family().architecture().c_str());
  std::printf("\n");
}

}  // namespace

void setup_import(CLI::App& app) {
  auto o = std::make_shared<ImportOptions>();
  auto* cmd = app.add_subcommand(
      "import", "Read a Hugging Face model folder (gpt2, llama, mixtral: config.json + safetensors) into a weight file");
  cmd->add_option("path", o->path,
                  "A model folder (config.json with model.safetensors, or shards and model.safetensors.index.json), "
                  "or one .safetensors file")
      ->required();
  cmd->add_option("--config", o->config, "config.json for a single .safetensors file (default: the one beside it)");
  cmd->add_option("--out", o->out, "Output HDF5 weight file (docs/models.md layout)")->required();
  add_quantize_option(*cmd, o->quantize,
                      "Store the weights only linear layers read in nf4 or int8 (QLoRA's base, docs/fine-tuning.md); "
                      "a command using the file must freeze them (--lora, --freeze)");
  cmd->add_flag("--force", o->force, "Replace an existing file of another kind");
  cmd->callback([o] { run_import(*o); });
}

namespace {
const RegisterCommand register_import(130, setup_import);
}  // namespace

}  // namespace remat::cli
