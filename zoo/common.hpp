#pragma once
// Helpers the model files share: parameter groups that recur across models,
// and the position ids a learned or rotary position scheme needs.
#include <string>
#include <vector>

#include "zoo/params.hpp"

namespace remat {

// <prefix>.weight [out, in] and, unless bias is false, <prefix>.bias [out].
void append_linear(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t out, std::int64_t in,
                   Init init = Init::normal, bool bias = true);
// <prefix>.weight (ones) and <prefix>.bias (zeros), both [D].
void append_layer_norm(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D);

// The zoo's linear layer: x W^T + b for <prefix>.weight and, if the store
// has it (and `bias`), <prefix>.bias; plus scale (x A^T) B^T where the store
// attached a LoRA adapter to the weight (zoo/params.hpp). Every model's
// linear layers go through it.
Tensor linear(const ParamStore& p, const std::string& prefix, const Tensor& x, bool bias = true);
// `out` (x's product with `weight`) plus scale (x A^T) B^T where the store
// attached a LoRA adapter to `weight`; `out` itself otherwise. For a layer
// that reads its weight another way (tp::replicated).
Tensor with_adapter(const ParamStore& p, const std::string& weight, const Tensor& x, const Tensor& out);

// int32 [S] = 0, 1, ..., S-1 for tokens[B, S].
Tensor positions(const Tensor& tokens);

// Teacher forcing: int32 ids[B, S] shifted right by one position along S,
// `start` in front (the last id drops out).
Tensor shift_right(const Tensor& ids, std::int32_t start = 0);

}  // namespace remat
