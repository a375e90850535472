#pragma once
// gpt2's pieces, shared by the models docs/models.md defines "as in gpt2"
// (revformer's F and G, the parallel block): parameters and forward of the
// attention branch, the MLP branch, the learned embeddings and the tied head.
#include <string>
#include <vector>

#include "core/rank_group.hpp"
#include "zoo/params.hpp"
#include "zoo/sizes.hpp"

namespace remat::gpt {

// Each takes the tensor-parallel group `group` (zoo/tensor_parallel.hpp; none
// by default): c_attn and c_fc column-parallel (c_attn's q | k | v split
// alike, so each rank holds whole heads), the c_proj row-parallel, wte split
// over the vocabulary.

// <prefix>.c_attn [3D, D] and <prefix>.c_proj [D, D] (residual output init), with biases.
void append_attention(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D, const RankGroup& group = {});
// <prefix>.c_fc [4D, D] and <prefix>.c_proj [D, 4D] (residual output init), with biases.
void append_mlp(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D, const RankGroup& group = {});
// wte [V, D] and wpe [S_max, D].
void append_embeddings(std::vector<ParamSpec>& p, std::int64_t V, std::int64_t D, std::int64_t S_max,
                       const RankGroup& group = {});

// LayerNorm with <prefix>.weight and .bias, epsilon 1e-5.
Tensor layer_norm(const ParamStore& p, const std::string& prefix, const Tensor& x, const RankGroup& group = {});

// dropout(c_proj(attention(c_attn(x)))), H heads, causal unless told
// otherwise, dropout on the probabilities too; under context parallelism
// (`context` split: x this rank's rows), the ring's attention (dropout with this rank's masks).
Tensor attention(const ParamStore& p, const std::string& prefix, const Tensor& x, int heads, double dropout,
                 bool causal = true, const RankGroup& group = {}, const RankGroup& context = RankGroup::context());
// dropout(c_proj(gelu_tanh(c_fc(x)))).
Tensor mlp(const ParamStore& p, const std::string& prefix, const Tensor& x, double dropout, const RankGroup& group = {});
// dropout(wte[tokens] + wpe[0..S)); under context parallelism, tokens are
// this rank's rows and take their positions in the whole sequence.
Tensor embeddings(const ParamStore& p, const Tensor& tokens, double dropout, const RankGroup& group = {},
                  const RankGroup& context = RankGroup::context());
// LN_f(x) @ wte^T (this rank's slice of the logits under tensor parallelism).
Tensor tied_head(const ParamStore& p, const Tensor& x, const RankGroup& group = {});

// The MLP's hidden size, 4D, as a registration gives it (ModelInfo::mlp_hidden).
inline std::int64_t mlp_hidden(const Sizes& z) { return 4 * std::int64_t(z.D); }

}  // namespace remat::gpt
