#pragma once
// A command's tensor-parallel layout (--tp N, zoo/tensor_parallel.hpp), made
// once at the edge: the group from the job's ranks, this rank's parts of the
// weights, and the whole model's gradients gathered back for a file.
#include <memory>
#include <string>
#include <vector>

#include "core/rank_group.hpp"
#include "zoo/model.hpp"
#include "zoo/params.hpp"

namespace remat {

// The tensor-parallel group of `size` ranks this process belongs to: every
// rank of the job, which must have exactly `size`, or (`data_parallel`) one
// of the job's consecutive groups of `size`, the groups training data-parallel
// (UserError saying how to start it otherwise).
RankGroup tensor_group(int size, bool data_parallel = false);

// Splits `setup`'s model over tensor_group(size), with sequence parallelism
// where `sequence` (nothing when size is 1 and not `sequence`):
// validates the layout, sets setup.sizes.tp and replaces the whole model's
// `params` by this rank's parts. Ranks other than 0 print nothing on stdout
// from then on (every rank computes the same tables).
void split_over_ranks(int size, bool sequence, ModelSetup& setup, std::unique_ptr<ParamStore>& params);

// Refuses a strategy planned from timed costs under a split (each rank would
// time its own and could plan differently, and the ranks must recompute alike).
void require_same_plan_on_every_rank(const RankGroup& tp, const std::vector<std::string>& strategies);

// The whole model's parameters with their gradients (each split one's parts
// joined from every rank; every rank calls this), for a gradient file.
std::unique_ptr<ParamStore> gather_whole(const ModelSetup& setup, const ParamStore& parts);

}  // namespace remat
