#pragma once
// Random draws inside a training step (dropout) are a pure function of
// (seed, step, op id, element index); op ids count random ops in forward
// order. A checkpoint region rewinds the cursor before it recomputes, so its
// ops draw exactly what they drew the first time.
#include <cstdint>

#include "autodiff/rng.hpp"

namespace remat::random_ops {

void begin_step(std::uint64_t seed, std::uint64_t step);  // cursor to 0
// The whole state (seed, step, cursor), to give back when a step's scope
// closes (step/step_scope.hpp).
struct State {
  std::uint64_t seed = 0, step = 0, cursor = 0;
};
State state();
void restore(const State& s);
std::uint64_t next_op();     // the id of the next random op
std::uint64_t cursor();
void set_cursor(std::uint64_t c);
// The stream an op's draws come from.
std::uint64_t stream(std::uint64_t op);
std::uint64_t seed();

}  // namespace remat::random_ops
