#pragma once
// A plan: what every block does with what it saves, as a tree. The top level
// partitions the blocks into parts run in forward: a plain block keeps what
// it saves, less the tensors of the tags it drops (recomputed from their
// recipes in backward); a segment keeps only its input and is recomputed in
// backward, its own parts (a partition of its blocks) saying how that
// recomputation runs: plain blocks that keep (less their drops), and
// sub-segments that keep only their input until their backward comes
// (multi-level). A plan is a Policy (strategies/policy.hpp): the engine runs
// it and predicts its memory like any other.
#include <cstdint>
#include <string>
#include <vector>

#include "strategies/planner/costs.hpp"
#include "strategies/policy.hpp"

namespace remat::planner {

struct PlanPart {
  int first = 0, last = 0;
  bool segment = false;
  std::vector<std::string> drops;  // plain: the tags recomputed in backward
  std::vector<PlanPart> inner;     // segment: its recomputation (empty: keep everything)
  bool offload = false;            // plain, top level: everything it saves goes to the host pool
};

struct Plan {
  std::vector<PlanPart> parts;
  std::int64_t budget = 0;
  std::int64_t predicted_peak = 0;  // activation bytes at the peak (predict_policy)
  double recompute_seconds = 0;     // what the plan runs again
  double predicted_seconds = 0;     // a full step plus that
};

Policy plan_policy(const std::vector<PlanPart>& parts, const std::string& name);

// The seconds a plan spends recomputing (and copying), by the cost model: a
// plain block at the top level its drops' recipes, or its copies if it
// offloads; a segment its recomputation, in which a
// plain block costs its forward and its drops, and a sub-segment its blocks'
// forward (unless it ends its span: then they run only in its own
// recomputation) plus its own recomputation.
double recompute_seconds(const ChainCosts& c, const SaveProfile& p, const std::vector<PlanPart>& parts);

// Fills predicted_peak, recompute_seconds and predicted_seconds.
void predict(Plan& plan, const ChainCosts& c, const SaveProfile& p);

// Block by block, one line each ("h.3  segment h.2-h.5, recomputed: ...").
std::string describe(const Plan& plan, const SaveProfile& p);
// Compact, for traces and errors: "[h.0 keep] [h.1-h.3 segment: ...]".
std::string summary(const std::vector<PlanPart>& parts, const SaveProfile& p);

}  // namespace remat::planner
