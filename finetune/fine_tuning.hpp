#pragma once
// Freezing and LoRA together, as the commands and the matrix apply them.
#include <memory>
#include <string>

#include "finetune/freeze.hpp"
#include "finetune/lora.hpp"
#include "finetune/quantize.hpp"

namespace remat {

struct FineTuning {
  FreezeOptions freeze;
  LoraOptions lora;
  QuantFormat quantize = QuantFormat::none;  // the frozen linear weights' format (finetune/quantize.hpp)
  bool any() const { return freeze.any() || lora.any(); }       // freezes something
  bool applies() const { return any() || quantize != QuantFormat::none; }  // changes the store at all
  // For run keys and results: "" for none, else e.g. "freeze:patterns=;below=6" and/or "lora:rank=8;...",
  // then "|quantize:nf4".
  std::string key() const;
  // Short, for tables and group names: "freeze-below 6", "lora 8", "freeze wte.*", "lora 8, nf4".
  std::string label() const;
};

// UserError unless `f` freezes every quantized weight of `params` (a weight
// file's, remat import --quantize): a quantized weight cannot train.
void require_quantized_frozen(const ParamStore& params, const FineTuning& f, int layers);

// Applies LoRA (a new store with the adapters, every base parameter frozen,
// each adapter checked to serve a linear on `batch`), then freezing, then
// quantization. `setup` names the model `params` are of (a rank's part under
// --ep: every rank freezes alike). Returns a summary, a line per step ("" if
// nothing was applied).
std::string apply_fine_tuning(std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch,
                              const FineTuning& f, std::uint64_t seed, const ModelSetup& setup);

}  // namespace remat
