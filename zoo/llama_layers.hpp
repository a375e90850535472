#pragma once
// llama's pieces, shared by the models docs/models.md defines "as llama"
// (mixtral's blocks are llama's with a mixture of experts for the FFN):
// parameters and forward of the grouped-query rotary attention branch.
#include <string>
#include <vector>

#include "zoo/params.hpp"
#include "zoo/sizes.hpp"

namespace remat::llama {

// <prefix>.wq [H hd, D], .wk and .wv [Hkv hd, D], .wo [D, H hd] (residual
// output init), no biases. Under z.tp (zoo/tensor_parallel.hpp) the heads
// split: wq, wk, wv column-parallel, wo row-parallel.
void append_attention(std::vector<ParamSpec>& p, const std::string& prefix, const Sizes& z);

// dropout(wo(attention(rotary(wq x), rotary(wk x), wv x))), causal,
// grouped-query, rotary base z.theta.
Tensor attention(const ParamStore& p, const std::string& prefix, const Tensor& x, const Sizes& z);

}  // namespace remat::llama
