#pragma once
// The optimal plan (strategies/planner/plan.hpp) for a memory budget: the
// least recomputation time whose predicted activation peak fits. A dynamic
// program over the chain of blocks in the spirit of rotor (Beaumont et al.,
// 2019), on the same memory model as predict_policy, over:
//   Top(i, m)    blocks i.. at the top level, m bytes free;
//   Span(k, b, m) blocks k..b of a segment's recomputation, m bytes free
//                 (which is also a sub-segment [k, b] recomputed on its own),
//                 in a table for spans that start at k and one per input a
//                 span's first block leaves held through the later blocks'
//                 forwards.
// Memory is discretised: the budget into `steps` units of u bytes (u =
// budget / steps, rounded down), every size rounded up to whole units. A
// plan it returns therefore fits the budget exactly; it may miss a plan
// whose peak lies within one unit per term of its peak expression (a term
// per block held: 0.3% of the budget at 12 blocks, a few percent at 64)
// below the budget.
#include <cstdint>
#include <optional>

#include "strategies/planner/plan.hpp"

namespace remat::planner {

// The default resolution for `blocks` blocks: as fine as keeps the program
// near 5 10^7 steps (4096 units up to 42 blocks, 1144 at 64).
int default_steps(int blocks);

// The fastest plan whose peak fits `budget` bytes; nullopt if none does.
// `steps` 0: the default resolution.
std::optional<Plan> solve(const ChainCosts& c, const SaveProfile& p, std::int64_t budget, int steps = 0);

// The smallest budget any plan fits (to about 0.5%), by bisection on solve.
std::int64_t smallest_budget(const ChainCosts& c, const SaveProfile& p);

}  // namespace remat::planner
