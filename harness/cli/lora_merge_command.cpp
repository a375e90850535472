// remat lora-merge: folds LoRA adapters into their weights, W + (alpha/R) B A,
// and writes plain weights (docs/models.md layout) that PyTorch and
// `remat grads` load.
#include <cstdio>
#include <memory>

#include "finetune/adapters_file.hpp"
#include "harness/cli/commands.hpp"
#include "harness/io/output_guard.hpp"

namespace remat::cli {
namespace {

struct LoraMergeOptions {
  std::string weights, adapters, out;
  bool force = false;
};

void run_lora_merge(const LoraMergeOptions& o) {
  check_output(o.out, FileKind::weights, {o.weights, o.adapters}, o.force);
  LoadedWeights w = load_weights(o.weights, o.force, /*skip_adapters=*/true);  // a --lora run holds both
  const AdapterFile adapters = read_adapters(o.adapters);
  // A quantized base (QLoRA) merges into its dequantized values: the
  // merged weights are plain float32.
  std::size_t dequantized = 0;
  for (const auto& name : w.params->names())
    if (w.params->quantized(name)) w.params->dequantize(name), ++dequantized;
  merge_adapters(*w.params, w.setup, adapters, o.adapters);
  write_weights(o.out, w.setup, *w.params, w.batch ? &*w.batch : nullptr);
  // --weights is read, never changed: the merge is in --out alone.
  std::printf("wrote %s: the weights of %s with %zu adapters (%s) of %s folded in (plain weights", o.out.c_str(),
              o.weights.c_str(), adapters.weights().size(), adapters.options.key().c_str(), o.adapters.c_str());
  if (dequantized > 0) std::printf("; its %zu quantized weights dequantized to float32 first", dequantized);
  std::printf(")\n");
}

}  // namespace

void setup_lora_merge(CLI::App& app) {
  auto o = std::make_shared<LoraMergeOptions>();
  auto* cmd = app.add_subcommand("lora-merge", "Fold LoRA adapters into their weights; write plain weights");
  cmd->add_option("--weights", o->weights, "The base weights (a weight file, or the run file of a --lora training)")
      ->required();
  cmd->add_option("--adapters", o->adapters, "The adapters: a file from `remat train --lora --adapters-out`, or its run file")
      ->required();
  cmd->add_option("--out", o->out, "The merged weights (HDF5, docs/models.md layout)")->required();
  cmd->add_flag("--force", o->force, "Replace --out even if it holds another kind of file");
  cmd->callback([o] { run_lora_merge(*o); });
}

namespace {
const RegisterCommand register_lora_merge(110, setup_lora_merge);
}  // namespace

}  // namespace remat::cli
