#pragma once
// Freezing and LoRA together, as the commands and the matrix apply them.
#include <memory>
#include <string>

#include "finetune/freeze.hpp"
#include "finetune/lora.hpp"

namespace remat {

struct FineTuning {
  FreezeOptions freeze;
  LoraOptions lora;
  bool any() const { return freeze.any() || lora.any(); }
  // For run keys and results: "" for none, else e.g. "freeze:patterns=;below=6" and/or "lora:rank=8;...".
  std::string key() const;
  // Short, for tables and group names: "freeze-below 6", "lora 8", "freeze wte.*".
  std::string label() const;
};

// Applies LoRA (a new store with the adapters, every base parameter frozen,
// each adapter checked to serve a linear on `batch`), then freezing. Returns
// a one-line summary ("" if nothing was applied).
std::string apply_fine_tuning(std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch,
                              const FineTuning& f, std::uint64_t seed, int layers);

}  // namespace remat
