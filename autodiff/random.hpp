#pragma once
// Random draws inside a training step (dropout) are a pure function of
// (seed, step, op id, element index); op ids count random ops in forward
// order. A checkpoint region rewinds the cursor before it recomputes, so its
// ops draw exactly what they drew the first time.
#include <cstdint>

#include "autodiff/rng.hpp"

namespace remat::random_ops {

void begin_step(std::uint64_t seed, std::uint64_t step);  // cursor to 0
std::uint64_t next_op();     // the id of the next random op
std::uint64_t cursor();
void set_cursor(std::uint64_t c);
// The stream an op's draws come from.
std::uint64_t stream(std::uint64_t op);
std::uint64_t seed();

}  // namespace remat::random_ops
