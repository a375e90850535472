#pragma once
// One training step's forward and backward under a strategy, measured: the
// unit every command runs.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "comm/comm.hpp"
#include "datasets/batch.hpp"
#include "strategies/strategy.hpp"
#include "zoo/model.hpp"

namespace remat {

// What every step of a run computes with: typed once where the run is
// asked for (the CLI's options, a training run file) and passed down.
struct RunSettings {
  std::uint64_t seed = 1;  // of the weights, the batch and the random draws (dropout)
  ops::AttentionKernel attention = ops::AttentionKernel::fused;  // the kernel the attention ops use
  Precision precision = Precision::fp32;                         // what steps compute in (docs/precision.md)
};

struct StepOptions {
  Strategy* strategy = nullptr;  // null: no strategy (everything kept)
  std::uint64_t seed = 1;        // random draws (dropout) are keyed by seed and step
  std::uint64_t step = 0;
  bool timeline = false;  // record the memory timeline of the step
  ops::AttentionKernel attention = ops::AttentionKernel::fused;  // the kernel the step's attention ops use
  bool zero_grad = true;  // false: add to the gradients already there (accumulating micro-batches)
  Precision precision = Precision::fp32;  // what the step computes in (docs/precision.md)
  // Backward starts from d(loss)/d(loss) = loss_scale (0: the precision's
  // default_loss_scale, 2^16 at fp16), so that 16-bit gradients do not
  // underflow. The gradients are divided by it again at the end of the step
  // unless keep_scaled (a trainer unscales its accumulated sum once, and
  // checks it for overflow first).
  double loss_scale = 0;
  bool keep_scaled = false;
};

// The options of step `step` of a run under `strategy`: the one place a
// step's options are made from the run's settings (the caller sets what is
// the step's own: timeline, zero_grad, loss scaling).
StepOptions step_options(const RunSettings& run, Strategy* strategy, std::uint64_t step = 0);

struct TimelinePoint {
  double seconds;
  std::int64_t bytes;  // device pool, minus what was live before the step
  std::string phase;
};

// A non-differentiable statistic a model reports for its step (mixtral's
// tokens per expert per layer), on the host.
struct Statistic {
  std::string name;
  Shape shape;
  std::vector<double> values;
};

struct StepResult {
  double loss = 0;
  std::vector<std::pair<std::string, double>> loss_parts;  // the model's named parts of the loss (mixtral: ce, aux)
  std::vector<Statistic> stats;
  double seconds = 0;
  std::int64_t activation_peak = 0;  // device pool: peak during the step minus live before it
  std::int64_t offload_peak = 0;     // offload pool: the same
  double offload_copy_seconds = 0;   // the offload copies' own time (on the copy stream on a device)
  double offload_wait_seconds = 0;   // the step's time spent issuing and waiting for them
  std::int64_t weight_copy_bytes = 0;  // the 16-bit copies of the weights (0 at fp32)
  double loss_scale = 1;               // what backward was seeded with
  double flops = 0, recompute_flops = 0;            // GEMM FLOPs
  double comm_bytes = 0, recompute_comm_bytes = 0;  // sent to other ranks (stats::Counts)
  // Dequantizing quantized weights (QLoRA), all and inside recomputation.
  double dequantize_flops = 0, recompute_dequantize_flops = 0;
  double dequantize_seconds = 0, recompute_dequantize_seconds = 0;
  std::map<std::string, std::int64_t> forward_ops;  // op -> forward runs
  std::map<std::string, std::int64_t> recomputed_ops;  // of those, run again inside recomputation
  std::map<std::string, std::int64_t> pool_peaks;      // every tracker pool's peak during the step (live bytes)
  std::vector<TimelinePoint> timeline;               // if asked
};

// Zeroes the parameter gradients (allocated once, so they are not counted as
// activations) unless told not to, runs forward under the strategy and
// backward, and measures.
StepResult run_step(const Model& model, const ParamStore& params, const Batch& batch, const StepOptions& options = {});

// The median of step times (the mean of the middle two for an even count;
// 0 for none): every command reports steps by it.
double median(std::vector<double> seconds);

// A sample's median and spread: half its interquartile range (quartiles
// interpolated between the sorted values; 0 for fewer than two). Robust to
// the odd slow step that a mean and a standard deviation are not.
struct Spread {
  double median = 0;
  double half_iqr = 0;
  double relative() const { return median > 0 ? half_iqr / median : 0; }
  // Whether v lies within the spread of the median: not told apart from it.
  bool holds(double v) const { return std::abs(v - median) <= half_iqr; }
};
Spread spread_of(std::vector<double> values);

// Throws UserError if the loss or a parameter's gradient is not finite,
// naming the loss and the first parameter (in the model's order) whose
// gradient holds a NaN or an infinity: a non-finite result is never a
// silent "loss nan".
void require_finite_result(double loss, const ParamStore& params);

// Every rank's gradient of each parameter that has one, added in rank order
// over comm's `group` into each rank's own: what ranks that split a step's
// work, not its parameters (pipeline stages, context parallelism, the data
// groups of `grads`), make of their parts.
void sum_gradients_over_ranks(const ParamStore& params, comm::Group group);

// A loss's parts and statistics as values, into r (what a step records of them).
void record_loss_details(const LossTerms& terms, StepResult& r);

// The step without measurement; returns the loss.
double forward_backward(const Model& model, const ParamStore& params, const Batch& batch,
                        const StepOptions& options = {});

// The step without measurement; returns the loss, its parts and the statistics.
StepResult forward_backward_result(const Model& model, const ParamStore& params, const Batch& batch,
                                   const StepOptions& options = {});

// Runs `fn` under the tracker's memory limit; false if it ran out of memory,
// over the limit or for real (a failed device allocation), and the partial
// graph is dropped.
bool within_limit(std::int64_t limit, const std::function<void()>& fn);


}  // namespace remat
