#include "autodiff/random.hpp"

namespace remat::random_ops {
namespace {

State& current() {
  thread_local State s;
  return s;
}

}  // namespace

void begin_step(std::uint64_t seed, std::uint64_t step) { current() = {seed, step, 0}; }
State state() { return current(); }
void restore(const State& s) { current() = s; }
std::uint64_t next_op() { return current().cursor++; }
std::uint64_t cursor() { return current().cursor; }
void set_cursor(std::uint64_t c) { current().cursor = c; }
std::uint64_t seed() { return current().seed; }
std::uint64_t stream(std::uint64_t op) { return rng::splitmix64(rng::splitmix64(current().step) ^ (op + 0x5bd1e995ull)); }

}  // namespace remat::random_ops
