#pragma once
// What ran: forward executions per op (PyTorch's tests count ops the same
// way to prove what a checkpoint recomputes) and GEMM FLOPs, each split into
// first-time and recomputed work. Recomputation (a checkpoint region re-run,
// a selective recipe) marks itself with RecomputeScope.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace remat::stats {

struct Counts {
  std::map<std::string, std::int64_t> forward;     // op name -> executions
  std::map<std::string, std::int64_t> recomputed;  // of those, inside recomputation
  double flops = 0;                                // GEMM FLOPs, all
  double recompute_flops = 0;                      // of those, inside recomputation
  // Bytes this rank sent to the others in collectives (tensor parallelism's
  // ops), all and inside recomputation; a shape-only run counts what it would send.
  double comm_bytes = 0, recompute_comm_bytes = 0;
  // Quantized weights dequantized for their products (autodiff/quantized.hpp):
  // FLOPs (dequantize_flops) and seconds, all and inside recomputation.
  double dequantize_flops = 0, recompute_dequantize_flops = 0;
  double dequantize_seconds = 0, recompute_dequantize_seconds = 0;
};

void reset();
// Puts `fresh` in place of this thread's counts and returns them (a step's
// scope, step/step_scope.hpp, opens and closes its own counts with it).
Counts exchange(Counts fresh);

// Work counted since the process started, never reset (on this thread): the
// GEMM FLOPs and the bytes of the tensors made. What a device model prices
// to cost a shape-only run (estimate/device_model.hpp).
struct Work {
  double flops = 0;
  double bytes = 0;
  double comm_bytes = 0;  // sent to other ranks (count_communication)
};
const Work& work();
void count_bytes(double bytes);
// Forward runs per op since `before` (a copy of counts().forward).
std::map<std::string, std::int64_t> forward_since(const std::map<std::string, std::int64_t>& before);
const Counts& counts();
void count_forward(const char* op);
void count_flops(double flops);
void count_communication(double bytes_sent);
void count_dequantize(double flops, double seconds);
bool recomputing();

// Every product through the GEMM front door while a GemmLogScope is open
// (on this thread): its shape, and the seconds it took, fenced. For the
// benchmarks' floor (the same products alone through the BLAS) and profile.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  double seconds = 0;
};
class GemmLogScope {
 public:
  explicit GemmLogScope(std::vector<GemmCall>& log);
  ~GemmLogScope();
  GemmLogScope(const GemmLogScope&) = delete;
  GemmLogScope& operator=(const GemmLogScope&) = delete;

 private:
  std::vector<GemmCall>* previous_;
};
// The open log, or null (the front door times and records only then).
std::vector<GemmCall>* gemm_log();

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
