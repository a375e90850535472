#pragma once
// A command's tensor-parallel layout (--tp N, zoo/tensor_parallel.hpp), made
// once at the edge: the group from the job's ranks, this rank's parts of the
// weights, and the whole model's gradients gathered back for a file.
#include <memory>
#include <string>
#include <vector>

#include "core/rank_group.hpp"
#include "datasets/batch.hpp"
#include "pipeline/schedule.hpp"
#include "zoo/model.hpp"
#include "zoo/params.hpp"

namespace remat {

// --tp `size` and --sp (`sequence`) as `setup`'s layout (false: none asked):
// the layout validated, then setup.sizes.tp set to this rank's place in its
// tensor group: every rank of the job, which must have exactly `size`, or
// (`data_parallel`) one of the job's consecutive groups of `size`, the groups
// training data-parallel (UserError saying how to start it otherwise). Ranks
// other than 0 print nothing on stdout from then on (they print the same).
bool apply_layout(int size, bool sequence, ModelSetup& setup, bool data_parallel);

// --ep `experts` (expert parallelism, zoo/expert_parallel.hpp): every rank
// of the job in one expert group, or (`data_parallel`) one of its
// consecutive groups of `experts`, the groups training data-parallel (false:
// none asked). `tp` and `sequence`: the tensor-parallel layout also asked
// for (refused beside it).
bool apply_expert_layout(int experts, int tp, bool sequence, ModelSetup& setup, bool data_parallel = false);

// A matrix's split (--tp N with or without --sp, --ep N or --cp N: one of
// them): the job's consecutive groups of N ranks, each group running its
// share of the cells on all of its ranks. Returns the groups, with this
// rank's place in its own; every size 1 where none is asked. The sizes are
// validated per model by the matrix's cells.
struct SplitGroups {
  RankGroup tp, ep, cp;
};
SplitGroups apply_shared_split(int tp, bool sequence, int ep, int cp);

// Data-parallel groups beside a split (--tp, --ep or --cp on a multiple of
// its ranks: the apply_*layout functions' `data_parallel`): each
// group takes its own consecutive B / groups sequences of `batch`
// (setup.sizes.B set to that), and a step's loss and gradients are the
// groups' mean (average_over_data_groups). Returns the number of groups, 1
// where there are none (nothing changed). UserError where the groups do not
// divide B (`origin`: where B came from, and what to do), or where a
// mixture's load-balancing loss, taken over the whole batch, would change.
int take_data_group_rows(ModelSetup& setup, Batch& batch, const std::string& origin);
// The data groups' mean: each group's mean loss and gradients summed over
// the groups in rank order, then divided by their number. Returns the loss.
double average_over_data_groups(const ParamStore& params, double loss);

// Ranks other than 0 print nothing on stdout from now on (they print the same).
void quiet_other_ranks();
// --pp `stages` for training: the job's consecutive groups of `stages`
// ranks are pipelines, the pipelines training data-parallel (false: none
// asked). `other_split`: --tp or --ep asked too (refused beside it).
bool apply_pipeline_layout(int stages, bool other_split);

// A command's step under --pp (grads, check, time; nothing without it): the
// model split into stages, the schedule and --stage-layers valid for it, the
// job exactly one pipeline; ranks other than 0 quiet from then on.
void apply_pipeline_step_layout(const ModelSetup& setup, const pipeline::PipelineSettings& pipe);

// --cp `size` (context parallelism, zoo/context_parallel.hpp): every rank of
// the job in one group, which splits the sequence, or (`data_parallel`) one
// of its consecutive groups of `size`, the groups training data-parallel
// (false: none asked); validated first. `other_split`: another split asked
// too (refused beside it).
bool apply_context_layout(int size, bool other_split, ModelSetup& setup, bool data_parallel = false);

// apply_layout, or --ep `experts` (expert parallelism,
// zoo/expert_parallel.hpp), and the whole model's `params` replaced by this
// rank's parts. One group, or (`data_parallel`) the job's consecutive groups.
void split_over_ranks(int size, bool sequence, int experts, ModelSetup& setup, std::unique_ptr<ParamStore>& params,
                      bool data_parallel = false);
// The whole model's `params` replaced by this rank's parts under `setup`'s
// split (--tp, --ep), adapters included; UserError for quantized weights.
void take_rank_parts(const ModelSetup& setup, std::unique_ptr<ParamStore>& params);

}  // namespace remat
