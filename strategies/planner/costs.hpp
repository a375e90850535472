#pragma once
// What the planner knows of a model, block by block, from a probe step
// (strategies/profile.hpp): the bytes each block saves, takes in and holds
// at its forward and backward peaks, and the seconds its forward and each
// droppable set of tags cost to run again. Timed where the profile was
// timed; otherwise bytes stand in for seconds (a FLOP-free fallback that
// ranks the same way for blocks of one model).
#include <cstdint>
#include <string>
#include <vector>

#include "strategies/profile.hpp"

namespace remat::planner {

// A way to keep a block plainly: drop the tensors of these tags (recomputed
// from their recipes in backward). The first of a block's variants drops
// nothing.
struct Variant {
  std::vector<std::string> tags;
  std::int64_t dropped = 0;  // bytes not kept
  double seconds = 0;        // running their recipes again
  std::int64_t forward_peak = 0;  // the block's forward peak without them (forward_peak_dropping)
  std::int64_t recompute_peak = 0;  // the same, as far as a recomputation ending at the block runs
};

struct BlockCosts {
  std::string name;
  std::int64_t saved = 0, input = 0, forward_peak = 0, backward_peak = 0, recompute_beside = 0;  // as in BlockSaves
  std::int64_t context = 0;  // as in BlockSaves: held from this block on, whatever the plan
  std::int64_t outside_before = 0;  // as in BlockSaves: beside what the blocks before keep
  // Its input bytes that it does not save: a segment starting here keeps
  // them through its recomputation beside what its blocks save.
  std::int64_t unsaved_input = 0;
  // Its forward peak inside a segment, as its first block or a later one (segment_forward_peak).
  std::int64_t segment_first_forward = 0, segment_forward = 0;
  bool new_stack = false;    // no segment runs across it
  double forward_seconds = 0;
  std::vector<Variant> variants;  // Pareto-optimal: none drops as much for less time
  double offload_seconds = 0;     // moving everything it saves to the host pool and back
};

struct ChainCosts {
  std::vector<BlockCosts> blocks;
  std::int64_t outside_peak = 0, tail_peak = 0;  // as in SaveProfile
  double step_seconds = 0;  // a step under full: what every plan adds its recomputation to
  bool timed = false;
  bool allow_offload = false;  // plain blocks may move what they save to the host pool
  // As in SaveProfile: the last offload group stays on the device while its
  // copy runs, through the forward of every later block.
  bool copies_in_flight = false;
};

ChainCosts chain_costs(const SaveProfile& p, bool allow_offload = false);

// The seconds to recompute the tensors of `tags` that block `b` saves.
double recipe_seconds(const BlockSaves& b, const std::vector<std::string>& tags, bool timed);

}  // namespace remat::planner
