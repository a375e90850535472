#pragma once
// QLoRA's base (Dettmers et al. 2023): `--quantize nf4|int8` keeps every
// frozen weight of the blocks that only linear layers read quantized
// (autodiff/quantized.hpp; the formats in docs/fine-tuning.md). Norms,
// embeddings, biases and the output head stay as they are, as QLoRA keeps them.
#include <string>

#include "autodiff/quantized.hpp"
#include "datasets/batch.hpp"
#include "zoo/model.hpp"

namespace remat {

// Quantizes the frozen weights of the blocks that only linear layers read
// in a forward pass of `model` on `batch`. Returns a one-line summary. UserError if
// nothing is frozen, no frozen weight is a linear's, or one's element count
// is not whole blocks of kQuantBlock.
std::string quantize_frozen(ParamStore& params, const Model& model, const Batch& batch, QuantFormat format);

// UserError unless weight `name` of `shape` is whole blocks of kQuantBlock values.
void require_whole_blocks(const std::string& name, const Shape& shape, QuantFormat format);

// The weights of the blocks that only linear layers read in a forward pass of the model
// `setup` names, found shape-only (nothing allocated, no kernel): what
// `remat import --quantize` quantizes.
std::vector<std::string> linear_weight_names(const ModelSetup& setup);

}  // namespace remat
