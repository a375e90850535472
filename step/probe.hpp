#pragma once
// The probe: one step under `full` that measures what a model saves, block
// by block, and, for planned strategies, what each part costs to run again;
// and what a model can run under (the tags it produces, the strategies that
// apply). What checking, the matrix and training share.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "comm/comm.hpp"
#include "datasets/batch.hpp"
#include "strategies/profile.hpp"
#include "strategies/strategy.hpp"
#include "zoo/model.hpp"

namespace remat {

// What the model saves, per block, and the step's working set, from one
// probe step (forward and backward, everything kept), its dropout drawn as
// the first step of `seed` draws it (under expert parallelism the masks,
// drawn before the router, decide the routing, and so the memory).
SaveProfile profile_saves(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention = ops::AttentionKernel::fused, std::uint64_t seed = 0);

// Where costs come from when not from the wall clock: a device model's
// clock over a shape-only run (estimate/device_model.hpp), and its price of
// moving a byte to the offload pool and back.
struct CostClock {
  std::function<double()> now;
  double offload_seconds_per_byte = 0;
};

// A timed profile for planned strategies (budget:<size>): profile_saves, a
// step under `full` timed `repeats` times (its median time and measured
// activation peak), and each block's forward and each recipe timed as many
// times (the fastest: what load from elsewhere cannot inflate). With a
// `clock`, times are read from it. Under a split layer (--tp, --ep), agreed
// over its group (agree_on_costs).
SaveProfile measure_costs(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention, std::uint64_t seed, int repeats = 3,
                          const CostClock* clock = nullptr);

// Makes a timed profile the same on every rank of group g, each figure (time
// or bytes) the group's largest: ranks that run blocks together, or gather
// weights at their boundaries (--tp, --ep, --cp, --shard-params), recompute
// alike and so must plan alike. Bytes differ only where routing sends a rank
// more tokens; there a block's totals are agreed as their parts (the saved
// tensors, a moment's tensors held only saved) and a rest, each the largest,
// so that what a plan predicts, whatever it drops, is at least each rank's
// peak: every rank fits within the plan's budget. A collective.
void agree_on_costs(SaveProfile& p, comm::Group g);

// Refuses a strategy planned from timed costs in a `training` under --ep:
// the ranks plan once from one probe batch (agree_on_costs makes that plan
// bound each rank's peak on that batch's routing), but later batches route
// their tokens elsewhere. A check, time, grads or matrix step runs the
// probe's own batch and dropout masks (profile_saves draws the step's),
// so its own routing, and takes them.
void refuse_planned_under_experts(const Sizes& z, const std::vector<std::string>& strategies, bool training = false);

// Plans `strategy` if it needs costs, measuring them unless `costs` (a timed
// profile of the same model, weights and batch) is given.
void prepare_strategy(Strategy& strategy, const Model& model, const ParamStore& params, const Batch& batch,
                      ops::AttentionKernel attention, std::uint64_t seed, const SaveProfile* costs = nullptr);

// The tags a model's saved tensors carry with this attention kernel, from a
// small probe forward (tiny sizes, with dropout).
std::vector<std::string> tags_produced(const std::string& model, ops::AttentionKernel kernel);

// The strategies `list` names for this model ("all" includes reversible for
// a reversible model); UserError for one that does not apply to it, or that
// names a tag the model does not produce (listing those it does).
std::vector<std::string> strategies_for(const std::string& model, const std::string& list,
                                        ops::AttentionKernel kernel = ops::AttentionKernel::fused);

}  // namespace remat
