#include "autodiff/random.hpp"

namespace remat::random_ops {
namespace {

struct State {
  std::uint64_t seed = 0, step = 0, cursor = 0;
};
State& state() {
  thread_local State s;
  return s;
}

}  // namespace

void begin_step(std::uint64_t seed, std::uint64_t step) { state() = {seed, step, 0}; }
std::uint64_t next_op() { return state().cursor++; }
std::uint64_t cursor() { return state().cursor; }
void set_cursor(std::uint64_t c) { state().cursor = c; }
std::uint64_t seed() { return state().seed; }
std::uint64_t stream(std::uint64_t op) { return rng::splitmix64(rng::splitmix64(state().step) ^ (op + 0x5bd1e995ull)); }

}  // namespace remat::random_ops
