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

// A command's split over ranks: --tp (with --sp), --ep, --cp, as asked.
// Tensor parallelism's group is the innermost (neighbouring ranks), then the
// expert or the context group (one of them beside it), then data parallelism.
struct RankLayout {
  int tp = 1;
  bool sp = false;
  int ep = 1, cp = 1;
  bool any() const { return tp > 1 || sp || ep > 1 || cp > 1; }
  int ranks() const { return tp * ep * cp; }  // of one model
  std::string flags() const;                 // "--tp 2 --sp --cp 2", for messages
  static RankLayout of(const Sizes& z) { return {z.tp.size, z.tp.sequence, z.ep.size, z.cp.size}; }
};

// `layout` as `setup`'s (false: none asked): validated for the model, then
// setup.sizes' groups set to this rank's places in them: every rank of the
// job in one model's groups, which must have exactly layout.ranks(), or
// (`data_parallel`) in one of the job's consecutive groups of as many, the
// groups training data-parallel (UserError saying how to start it
// otherwise). The parameters are still the whole model's (take_rank_parts).
// Ranks other than 0 print nothing on stdout from then on (they print the same).
bool apply_split(const RankLayout& layout, ModelSetup& setup, bool data_parallel);

// A matrix's split: the job's consecutive groups of layout.ranks() ranks,
// each group running its share of the cells on all of its ranks. Returns
// the groups, with this rank's place in each; every size 1 where none is
// asked. The sizes are validated per model by the matrix's cells.
struct SplitGroups {
  RankGroup tp, ep = RankGroup::expert(), cp = RankGroup::context();
};
SplitGroups apply_shared_split(const RankLayout& layout);

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
// asked). `other_split`: --tp, --ep or --cp asked too (refused beside it).
bool apply_pipeline_layout(int stages, bool other_split);

// A command's step under --pp (grads, check, time; nothing without it): the
// model split into stages, the schedule and --stage-layers valid for it, the
// job exactly one pipeline; ranks other than 0 quiet from then on.
void apply_pipeline_step_layout(const ModelSetup& setup, const pipeline::PipelineSettings& pipe);

// The whole model's `params` replaced by this rank's parts under `setup`'s
// split (--tp, --ep; nothing under --cp alone), adapters and quantized
// weights included.
void take_rank_parts(const ModelSetup& setup, std::unique_ptr<ParamStore>& params);

}  // namespace remat
