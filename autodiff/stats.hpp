#pragma once
// What ran: forward executions per op (PyTorch's tests count ops the same
// way to prove what a checkpoint recomputes) and GEMM FLOPs, each split into
// first-time and recomputed work. Recomputation (a checkpoint region re-run,
// a selective recipe) marks itself with RecomputeScope.
#include <cstdint>
#include <map>
#include <string>

namespace remat::stats {

struct Counts {
  std::map<std::string, std::int64_t> forward;     // op name -> executions
  std::map<std::string, std::int64_t> recomputed;  // of those, inside recomputation
  double flops = 0;                                // GEMM FLOPs, all
  double recompute_flops = 0;                      // of those, inside recomputation
};

void reset();
// Forward runs per op since `before` (a copy of counts().forward).
std::map<std::string, std::int64_t> forward_since(const std::map<std::string, std::int64_t>& before);
const Counts& counts();
void count_forward(const char* op);
void count_flops(double flops);
bool recomputing();

class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

}  // namespace remat::stats
