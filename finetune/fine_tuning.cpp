#include "finetune/fine_tuning.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "zoo/expert_parallel.hpp"

namespace remat {

std::string FineTuning::key() const {
  std::string k;
  if (freeze.any()) k += "freeze:" + freeze.key();
  if (lora.any()) k += std::string(k.empty() ? "" : "|") + "lora:" + lora.key();
  if (quantize != QuantFormat::none) k += std::string(k.empty() ? "" : "|") + "quantize:" + quant_format_name(quantize);
  return k;
}

std::string FineTuning::label() const {
  std::string l;
  if (freeze.below > 0) l += "freeze-below " + std::to_string(freeze.below);
  for (const auto& p : freeze.patterns) l += (l.empty() ? "freeze " : ",") + p;
  if (lora.any()) l += (l.empty() ? "" : ", ") + std::string("lora ") + std::to_string(lora.rank);
  if (quantize != QuantFormat::none) l += (l.empty() ? "" : ", ") + std::string(quant_format_name(quantize));
  for (auto& c : l)
    if (c == '/') c = '_';  // group names
  return l;
}

void require_quantized_frozen(const ParamStore& params, const FineTuning& f, int layers) {
  if (!params.any_quantized() || f.lora.any()) return;  // LoRA freezes every base parameter
  std::vector<std::string> frozen;
  if (f.freeze.any()) frozen = frozen_names(params, f.freeze, layers);
  for (const auto& name : params.names())
    if (params.quantized(name) && std::find(frozen.begin(), frozen.end(), name) == frozen.end())
      throw UserError("'" + name + "' is quantized (" + quant_format_name(params.quantized(name)->format) +
                      ") and cannot train: fine-tune with --lora, or freeze it (--freeze, --freeze-below)");
}

std::string apply_fine_tuning(std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch,
                              const FineTuning& f, std::uint64_t seed, const ModelSetup& setup) {
  const int layers = setup.sizes.L;
  require_quantized_frozen(*params, f, layers);
  if (f.lora.any()) {
    params = with_lora(*params, f.lora, seed, layers, setup.sizes.tp);
    require_adapters_used(model, *params, batch);
  }
  if (f.freeze.any()) apply_freeze(*params, f.freeze, layers, ep::whole_names(setup));
  if (!f.any()) return quantize_frozen(*params, model, batch, f.quantize);  // "", or refused: nothing is frozen
  std::int64_t frozen = 0, tensors = 0;
  for (std::size_t i = 0; i < params->names().size(); ++i)
    if (!params->trainable(i)) frozen += numel(params->specs()[i].shape), ++tensors;
  const std::string said =
      "fine-tuning (" + f.label() + "): " + std::to_string(frozen) + " of " + std::to_string(params->count()) +
      " parameter values frozen (" + std::to_string(tensors) + " of " + std::to_string(params->names().size()) +
      " tensors)" +
      (f.lora.any() ? ", LoRA " + f.lora.key() + " on " + std::to_string(params->adapted().size()) + " weights" : "");
  const std::string quantized = quantize_frozen(*params, model, batch, f.quantize);
  return quantized.empty() ? said : said + "\n" + quantized;
}

}  // namespace remat
