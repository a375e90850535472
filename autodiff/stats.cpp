#include "autodiff/stats.hpp"

#include <utility>

namespace remat::stats {
namespace {

Counts& state() {
  thread_local Counts c;
  return c;
}
Work& work_done() {
  thread_local Work w;
  return w;
}
bool& flag() {
  thread_local bool recomputing = false;
  return recomputing;
}

}  // namespace

void reset() { state() = Counts{}; }
Counts exchange(Counts fresh) {
  std::swap(state(), fresh);
  return fresh;
}

std::map<std::string, std::int64_t> forward_since(const std::map<std::string, std::int64_t>& before) {
  std::map<std::string, std::int64_t> delta;
  for (const auto& [op, n] : state().forward) {
    const auto it = before.find(op);
    const std::int64_t d = n - (it == before.end() ? 0 : it->second);
    if (d > 0) delta[op] = d;
  }
  return delta;
}
const Counts& counts() { return state(); }
const Work& work() { return work_done(); }
void count_bytes(double bytes) { work_done().bytes += bytes; }

void count_forward(const char* op) {
  ++state().forward[op];
  if (flag()) ++state().recomputed[op];
}

void count_flops(double flops) {
  state().flops += flops;
  work_done().flops += flops;
  if (flag()) state().recompute_flops += flops;
}

void count_communication(double bytes_sent) {
  state().comm_bytes += bytes_sent;
  work_done().comm_bytes += bytes_sent;
  if (flag()) state().recompute_comm_bytes += bytes_sent;
}

void count_dequantize(double flops, double seconds) {
  state().dequantize_flops += flops;
  state().dequantize_seconds += seconds;
  if (!flag()) return;
  state().recompute_dequantize_flops += flops;
  state().recompute_dequantize_seconds += seconds;
}

std::vector<GemmCall>*& log_slot() {
  thread_local std::vector<GemmCall>* log = nullptr;
  return log;
}
std::vector<GemmCall>* gemm_log() { return log_slot(); }
GemmLogScope::GemmLogScope(std::vector<GemmCall>& log) : previous_(log_slot()) { log_slot() = &log; }
GemmLogScope::~GemmLogScope() { log_slot() = previous_; }

bool recomputing() { return flag(); }
RecomputeScope::RecomputeScope() : previous_(flag()) { flag() = true; }
RecomputeScope::~RecomputeScope() { flag() = previous_; }

}  // namespace remat::stats
