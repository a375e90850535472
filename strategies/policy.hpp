#pragma once
// The seam every strategy but reversible is written against: one decision
// per saved tensor, in the spirit of PyTorch's CheckpointPolicy and JAX's
// remat policies, plus, for checkpointing, which blocks form a segment.
//
//   decide(tensor) -> keep | recompute | offload | no opinion
//     keep       on the device (the default when no policy has an opinion)
//     recompute  not stored: run its producing op again in backward, from
//                what that op saved anyway (its recipe). A tensor without a
//                recipe cannot be recomputed alone and is kept.
//     offload    stored in the host offload pool between forward and
//                backward
//   segment(block) -> the checkpoint segment the block belongs to, if any:
//                a segment keeps only its inputs (each decided like any
//                saved tensor, with `segment_input` set); everything saved
//                inside is recomputed by re-running the segment in backward.
//
// Policies compose ("selective:softmax+offload") as JAX's do: where two
// answer differently, keep wins over recompute (a tensor one policy needs on
// the device is never dropped by another), and recompute over offload
// (offload places what is stored; a recomputed tensor is not stored). A
// composition is rejected when it is built if two parts define segments, or
// if a part would decide nothing (every tensor it has an opinion on is
// decided otherwise by the rest: "full+offload").
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/ops/tags.hpp"
#include "autodiff/region.hpp"
#include "autodiff/tensor.hpp"

namespace remat {

enum class Decision { none, keep, recompute, offload };
const char* decision_name(Decision d);

// What a policy knows of a saved tensor.
struct SavedTensorInfo {
  const char* tag;            // what produced it (Tensor::tag)
  const BlockInfo& block;     // the block it is saved in
  const Shape& shape;
  std::int64_t bytes;
  bool recomputable;          // it has a recipe (recompute is possible)
  bool segment_input;         // it is the input of a checkpoint segment
  // The block's own input, made by an earlier block: its recipe reads what
  // that block saved (which a segment would have to recompute first).
  bool block_input = false;
};

struct Policy;

// Blocks [first, last] run as one checkpoint region.
struct Segment {
  int first = 0, last = 0;
  // How the region's recomputation in backward runs its blocks (null: keep
  // everything they save, one level). It may drop tensors by tag, and make
  // sub-segments that keep only their input during the recomputation and
  // are recomputed again when their backward comes (multi-level
  // checkpointing, as rotor and Revolve do; the planner makes these).
  std::shared_ptr<const Policy> inner;
};

struct Policy {
  std::string name;  // the spec it came from, for messages
  std::vector<std::string> named_tags;  // tags or groups it names (checked against what a model produces)
  std::function<Decision(const SavedTensorInfo&)> decide;            // may be empty: no opinion on anything
  std::function<std::optional<Segment>(const BlockInfo&)> segment;   // may be empty: no segments

  Decision decision(const SavedTensorInfo& t) const { return decide ? decide(t) : Decision::none; }
  std::optional<Segment> segment_of(const BlockInfo& b) const { return segment ? segment(b) : std::nullopt; }
};

// The answer of two policies that answered `a` and `b` (the rule above).
Decision combine(Decision a, Decision b);

// One policy answering as all of `parts` together; UserError naming `spec`
// if the composition is rejected (see above).
Policy compose(const std::vector<Policy>& parts, const std::string& spec);


}  // namespace remat
