#pragma once
// The one check every op of a split layer makes (tensor parallelism,
// autodiff/ops/tensor_parallel.cpp; expert parallelism, expert_parallel.cpp).
#include "core/rank_group.hpp"

namespace remat::ops::detail {

// Refuses (UserError) running op over `g` where comm's split group does not
// have g's ranks (the command was not started under mpirun as the layout
// says), or off the host backend. `what`: "tensor" or "expert". Nothing is
// checked in a shape-only run (no ranks run it).
void require_split_group(const char* op, const RankGroup& g, const char* what);

}  // namespace remat::ops::detail
