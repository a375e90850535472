#pragma once
// Training under tensor parallelism (zoo/tensor_parallel.hpp): every rank
// holds its parts of the split parameters, so what a training needs whole
// (a run file's weights and optimizer state, the global gradient norm) is
// gathered or summed over the job's ranks here.
#include <memory>
#include <vector>

#include "zoo/model.hpp"
#include "zoo/params.hpp"

namespace remat {

// The whole tensor of shape `whole` from every rank's `part` of it, split as
// `spec` says (every rank calls this: a collective).
Tensor whole_of(const Tensor& part, const ParamSpec& spec, const Shape& whole, int ranks);

// The whole model's parameters from every rank's parts (`parts`, the split
// model's store; `setup` the split model's), with their gradients where
// `with_gradients` (a collective). Under expert parallelism a parameter
// every rank holds has, on each, the gradient of its own sequences: the
// whole one is their sum.
std::unique_ptr<ParamStore> whole_store(const ModelSetup& setup, const ParamStore& parts, bool with_gradients);

// Under expert parallelism: an optimizer buffer per parameter of `parts`
// (this rank's) as the whole model's, in its order: an expert's from the
// rank holding it, a shared layer's this rank's (every rank's is the same).
std::vector<Tensor> whole_expert_buffers(const ModelSetup& setup, const ParamStore& parts,
                                         const std::vector<Tensor>& buffers);

// The global norm of the gradients whose sums of squares are `squares`
// (parameter i's, of this rank's part; 0 where frozen): the split
// parameters' parts summed over the ranks of `g` (a part several ranks
// hold, once), the whole ones once (every rank holds the same); the same on
// every rank.
double split_gradient_norm(const ParamStore& parts, const std::vector<double>& squares, const RankGroup& g);
// The same on a grid of tensor x expert ranks (z.tp and z.ep): a split
// parameter's parts summed over the tensor group, an expert's over the
// expert group (each rank holds its own experts), a split expert's over
// both; what every rank holds alike, once.
double grid_gradient_norm(const ParamStore& parts, const std::vector<double>& squares, const Sizes& z);

}  // namespace remat
