#pragma once
// The one check every op of a split layer makes (tensor parallelism,
// autodiff/ops/tensor_parallel.cpp; expert parallelism, expert_parallel.cpp;
// context parallelism, ring_attention.cpp), and the job's rank group a
// RankGroup's collectives run over.
#include "comm/comm.hpp"
#include "core/rank_group.hpp"

namespace remat::ops::detail {

// comm's group for g's axis.
inline comm::Group comm_group(const RankGroup& g) {
  switch (g.axis) {
    case Axis::context: return comm::Group::context;
    case Axis::expert: return comm::Group::expert;
    default: return comm::Group::tensor;
  }
}

// Refuses (UserError) running op over `g` where comm's group on g's axis
// does not have g's ranks (the command was not started under mpirun as the
// layout says), or off the host backend. Nothing is checked in a shape-only
// run (no ranks run it).
void require_split_group(const char* op, const RankGroup& g);

}  // namespace remat::ops::detail
