#include "autodiff/random.hpp"

namespace remat::random_ops {
namespace {

State& current() {
  thread_local State s;
  return s;
}
std::uint64_t& rank_part() {  // the same on every thread: the rank's own
  static std::uint64_t p = 0;
  return p;
}
std::uint64_t& part() {  // 0: not in a part; else the part's index + 1
  thread_local std::uint64_t p = 0;
  return p;
}

}  // namespace

void begin_step(std::uint64_t seed, std::uint64_t step) { current() = {seed, step, 0}; }
State state() { return current(); }
void restore(const State& s) { current() = s; }
std::uint64_t next_op() { return current().cursor++; }
std::uint64_t cursor() { return current().cursor; }
void set_cursor(std::uint64_t c) { current().cursor = c; }
std::uint64_t seed() { return current().seed; }
void set_rank_part(std::uint64_t part) { rank_part() = part; }

std::uint64_t stream(std::uint64_t op) {
  std::uint64_t s = rng::splitmix64(rng::splitmix64(current().step) ^ (op + 0x5bd1e995ull));
  if (rank_part() != 0) s = rng::splitmix64(s ^ rng::splitmix64(~rank_part()));
  return part() == 0 ? s : rng::splitmix64(s ^ rng::splitmix64(part()));
}
// Inside another part (a tensor-parallel rank's part of an expert-parallel
// rank's sequences), a part of that part: a stream of its own.
PartScope::PartScope(std::uint64_t p) : previous_(part()) {
  part() = previous_ == 0 ? p + 1 : rng::splitmix64(previous_) ^ (p + 1);
}
PartScope::~PartScope() { part() = previous_; }

}  // namespace remat::random_ops
