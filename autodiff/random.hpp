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
// Under context parallelism every rank's tensors hold its own rows of the
// sequence: each rank draws from streams of its own (`part`: its place in
// the context group + 1; 0: none, the default), for the whole process.
void set_rank_part(std::uint64_t part);

// While alive, the streams of the ops drawn are those of part `part` of a
// tensor split over ranks (tensor parallelism: each rank's heads, or its part
// of the sequence), so that ranks draw independent masks for their parts
// where the same element index means another element; none outside it (a
// replicated tensor draws the same mask on every rank).
class PartScope {
 public:
  explicit PartScope(std::uint64_t part);
  ~PartScope();
  PartScope(const PartScope&) = delete;
  PartScope& operator=(const PartScope&) = delete;

 private:
  std::uint64_t previous_;
};
std::uint64_t seed();

}  // namespace remat::random_ops
