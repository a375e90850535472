#include "finetune/quantize.hpp"

#include <algorithm>

#include "autodiff/shape_only.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "finetune/freeze.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

namespace {

// The weights inside blocks that a forward pass reads through linear layers
// alone. An output head (outside the blocks) stays as it is: QLoRA keeps it
// in 16 bits (bitsandbytes skips lm_head).
std::vector<std::string> linear_only(const ParamStore& params, const Model& model, const Batch& batch) {
  params.record_reads();
  {
    NoGradScope no_grad;
    model.loss(params, batch);
  }
  current_tape().clear();
  std::vector<std::string> out;
  for (const auto& name : params.linear_only_reads())
    if (block_of(name) >= 0) out.push_back(name);
  return out;
}

// Of those, the frozen ones.
std::vector<std::string> frozen_linear_weights(const ParamStore& params, const Model& model, const Batch& batch) {
  std::vector<std::string> out;
  for (const auto& name : linear_only(params, model, batch))
    if (!params.trainable(params.index_of(name))) out.push_back(name);
  return out;
}

// Weight `name` quantized: under tensor parallelism, a split weight's part
// is cut from the whole weight quantized (gathered from the group's ranks),
// so that every rank dequantizes one process's values.
void quantize_part(ParamStore& params, const std::string& name, const RankGroup& g, QuantFormat format) {
  const std::size_t i = params.index_of(name);
  const ParamSpec& spec = params.specs()[i];
  const Shape whole = tp::whole_shape(spec, g.size);
  const QuantBlocks where = tp::quant_blocks(spec, whole, g);
  if (!where.part()) return params.quantize(name, format);
  const std::vector<float> values = tp::whole_values(params.tensors()[i], spec, g);
  params.set_quantized(name, quantized_part(format, values.empty() ? std::vector<std::uint8_t>()
                                                                   : quantize_values(values, format),
                                            spec.shape, where));
}

}  // namespace

void require_whole_blocks(const std::string& name, const Shape& shape, QuantFormat format) {
  if (numel(shape) % kQuantBlock != 0)
    throw UserError(std::string("--quantize ") + quant_format_name(format) + ": '" + name + "' " + to_string(shape) +
                    " has " + std::to_string(numel(shape)) + " values, not whole blocks of " +
                    std::to_string(kQuantBlock));
}

std::string quantize_frozen(ParamStore& params, const Model& model, const Batch& batch, QuantFormat format) {
  if (format == QuantFormat::none) return "";
  const std::string flag = std::string("--quantize ") + quant_format_name(format);
  bool any_frozen = false;
  for (std::size_t i = 0; i < params.names().size(); ++i) any_frozen = any_frozen || !params.trainable(i);
  if (!any_frozen)
    throw UserError(flag + ": nothing is frozen (only frozen weights are quantized): add --lora, --freeze or "
                           "--freeze-below");
  const std::vector<std::string> names = frozen_linear_weights(params, model, batch);
  if (names.empty() && params.any_quantized()) return "";  // a quantized weight file's, and nothing more
  if (names.empty()) throw UserError(flag + ": no frozen weight is a linear layer's: nothing to quantize");
  for (const auto& name : names) {  // every refusal before anything is quantized
    const ParamSpec& spec = params.specs()[params.index_of(name)];
    const Shape whole = tp::whole_shape(spec, model.sizes().tp.size);
    require_whole_blocks(name, whole, format);
    tp::quant_blocks(spec, whole, model.sizes().tp);
  }
  std::int64_t before = 0, after = 0;
  for (const auto& name : names) {
    before += std::int64_t(params.tensors()[params.index_of(name)].nbytes());
    quantize_part(params, name, model.sizes().tp, format);
    after += std::int64_t(params.tensors()[params.index_of(name)].nbytes());
  }
  return "quantized (" + std::string(quant_format_name(format)) + "): " + std::to_string(names.size()) +
         " frozen linear weights, " + human_bytes(double(before)) + " -> " + human_bytes(double(after));
}

std::vector<std::string> linear_weight_names(const ModelSetup& setup) {
  ShapeOnlyScope shape_only;
  Sizes z = setup.sizes;
  z.B = 1;
  z.S = std::min(z.S, 8);  // which weights a forward reads does not depend on its length
  const auto model = models().find(setup.model).make(z);
  const ParamStore params(model->params(), DType::f32);
  const Batch batch = empty_batch(z.B, z.S);
  return linear_only(params, *model, batch);
}

}  // namespace remat
