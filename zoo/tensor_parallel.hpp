#pragma once
// Tensor parallelism (Shoeybi et al. 2019, Megatron-LM's layout) as the zoo's
// models use it: each rank of the group holds part of every split layer.
//   column-parallel linear: the output features split; each rank computes
//     its part of y from the whole x (attention's q/k/v, the MLP's first
//     projections), its input entered once through enter();
//   row-parallel linear: the input features split; each rank's partial
//     x W^T is summed over the ranks, then the bias added (attention's output
//     projection, the MLP's second);
//   the vocabulary split: each rank embeds its rows of the table and computes
//     its slice of the logits, and the cross-entropy combines the slices.
// Sequence parallelism (Korthikanti et al. 2022; g.sequence) splits what runs
// between the split layers along the sequence: each rank's residual stream,
// norms and dropout hold S / size positions; enter() all-gathers the
// sequence, row_linear() and the embedding reduce-scatter it, and the
// parameters every rank holds whole are read through shared(), whose
// gradient (each rank's from its positions) is summed over the ranks.
// With a group of one every function here is the unsplit layer, op for op, so
// a model written with them runs unchanged without tensor parallelism.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/quantized.hpp"
#include "core/rank_group.hpp"
#include "zoo/params.hpp"
#include "zoo/sizes.hpp"

namespace remat::tp {

// <prefix>.weight [out, in] with this rank's out / g.size rows (each of
// `blocks` row blocks split alike), and the bias's matching part.
// `parts` (0: the group's size) fewer than the ranks: out / parts rows each,
// the same on size / parts consecutive ranks (replicated key/value heads).
void append_column(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t out, std::int64_t in,
                   const RankGroup& g, Init init = Init::normal, bool bias = true, int blocks = 1, int parts = 0);
// The parts key/value projections are cut into: Hkv where the group has more
// ranks than key/value heads (each rank then holds the one head its query
// heads use, as Megatron replicates them), else 0 (one part per rank).
int kv_parts(int kv_heads, const RankGroup& g);
// A column-parallel parameter's part held by several ranks (`parts` > 0),
// as read (p[name], or p.linear_weight(name) for a linear's weight, which
// --quantize may quantize): each rank's gradient comes from its own query
// heads, so backward sums it over the ranks sharing the part; `read` itself
// where every rank holds its own part.
Tensor replicated(const Tensor& read, int parts, const RankGroup& g);
// <prefix>.weight [out, in] with this rank's in / g.size columns; the bias whole.
void append_row(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t out, std::int64_t in,
                const RankGroup& g, Init init = Init::residual_out, bool bias = true);
// A vocabulary table [V, D]: this rank's V / g.size rows.
void append_vocabulary(std::vector<ParamSpec>& p, const std::string& name, std::int64_t V, std::int64_t D,
                       const RankGroup& g);

// x as the column-parallel layers that follow read it: the same values, the
// gradient summed over the group in backward (under sequence parallelism:
// every rank's part of the sequence gathered).
Tensor enter(const Tensor& x, const RankGroup& g);
// The parameter `name`, held whole on every rank, as a layer of the
// sequence-parallel region reads it (p[name] otherwise).
Tensor shared(const ParamStore& p, const std::string& name, const RankGroup& g);
// The positions of this rank's tokens: 0 .. S-1, or its part of them under
// sequence parallelism (tokens[B, S] whole on every rank).
Tensor positions(const Tensor& tokens, const RankGroup& g);
// The row-parallel linear on this rank's part of the features: the parts'
// x W^T summed over the group, then the bias (if `bias`).
Tensor row_linear(const ParamStore& p, const std::string& prefix, const Tensor& x, const RankGroup& g,
                  bool bias = true);
// tokens through the vocabulary table `name`: the whole sequence on every
// rank, or this rank's part of it under sequence parallelism.
Tensor embedding(const ParamStore& p, const std::string& name, const Tensor& tokens, const RankGroup& g);
// Dropout on a tensor of the sequence-parallel region (this rank's part of
// the sequence under --sp: its own masks), or a replicated one (the same
// masks on every rank).
Tensor dropout(const Tensor& x, double p, const RankGroup& g);
// Runs `f` (an op on this rank's heads) drawing this rank's own dropout masks.
Tensor on_my_heads(const RankGroup& g, const std::function<Tensor()>& f);

// Mean cross-entropy of this rank's logits slice against the targets.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const RankGroup& g);

// Refuses (UserError, one line) a layout `model` cannot run at these sizes:
// a model not split yet, or a size the group does not divide.
void validate(const std::string& model, const Sizes& sizes);

// This rank's parts of the whole model's parameters: a store of `specs`
// (the split model's) filled from `whole` (the unsplit model's, same names).
std::unique_ptr<ParamStore> part_of(const ParamStore& whole, const std::vector<ParamSpec>& specs,
                                    const RankGroup& g);
// A split parameter's whole shape: its part's, times its parts along the
// split dimension (the group's `ranks` where spec.split.parts is 0).
Shape whole_shape(const ParamSpec& spec, int ranks);
// This rank's part of a whole parameter's values (row-major, `whole_shape`).
std::vector<double> part_values(const std::vector<double>& whole, const ParamSpec& spec, const Shape& whole_shape,
                                const RankGroup& g);
// The whole parameter from every rank's part, parts[r] being rank r's
// values (row-major, spec.shape each): `whole_shape`'s values.
std::vector<double> join_parts(const std::vector<std::vector<double>>& parts, const ParamSpec& spec,
                               const Shape& whole_shape);

// QLoRA under the split: a rank's part of a quantized weight is the whole
// weight's bytes at its places (autodiff/quantized.hpp's QuantBlocks), so it
// dequantizes to exactly the values one process reads there.
// Where rank g.rank's part of weight `spec` (whole: `whole`) lies in the
// whole, in blocks of kQuantBlock; nothing (not a part) where the weight is
// not split. UserError where the part's runs are not whole blocks.
QuantBlocks quant_blocks(const ParamSpec& spec, const Shape& whole, const RankGroup& g);
// This rank's part of `whole`, a quantized whole weight (a weight file's).
QuantizedWeight quantized_part_of(const QuantizedWeight& whole, const ParamSpec& spec, const RankGroup& g);
// The whole weight's values from every rank's `part` of it (a collective
// over g's ranks; nothing is gathered in a shape-only run: empty).
std::vector<float> whole_values(const Tensor& part, const ParamSpec& spec, const RankGroup& g);

}  // namespace remat::tp
