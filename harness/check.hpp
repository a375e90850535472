#pragma once
// Gradient equivalence and memory of strategies against `full`, on the same
// weights and batch: what `remat check` prints and the tests assert.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "step/probe.hpp"
#include "step/step.hpp"
#include "strategies/profile.hpp"

namespace remat {

struct GradientComparison {
  double loss_diff = 0;
  double max_abs = 0;  // worst |g - g_full| over every parameter element
  double max_rel = 0;  // worst per-tensor max |g - g_full| / max |g_full|
  bool bitwise = true;  // loss and every gradient identical to the bit
  std::string worst;    // the parameter with the largest relative error
  std::vector<double> abs_by_param, rel_by_param;  // in the parameters' order
};

struct CheckRow {
  std::string strategy;
  bool exact = true;  // performs the same arithmetic as full
  StepResult step;
  GradientComparison vs_full;
  std::optional<GradientComparison> vs_golden;
  MemoryPrediction predicted;  // activation bytes at the peak, device and offload pool
  std::optional<ReconstructionError> reconstruction;  // reversible: rebuilt vs true block inputs, worst block
  std::vector<ReconstructionError> reconstruction_by_block;  // and each block's, in forward order
  std::string trace;           // per-region trace, if asked
  bool oom = false;            // the step passed --mem-limit: nothing else in the row holds
};


struct CheckOptions {
  RunSettings run;  // seed, attention kernel, precision
  bool trace = false;
  bool timeline = false;  // record each strategy's memory timeline
  const std::vector<std::vector<float>>* golden = nullptr;  // compare every strategy with these gradients too
  double golden_loss = 0;
  std::int64_t mem_limit = 0;  // cap on the device pool during each strategy's steps (0: none)
  const SaveProfile* costs = nullptr;  // a timed profile for planned strategies (measured if needed and null)
  // Called after full's step and each strategy's, before their gradients are
  // read: what the layout does with them (data-parallel groups beside a
  // split average theirs); returns the step's loss from its own.
  std::function<double(double loss)> after_step;
  // Called before each strategy's step (index, count, spec).
  std::function<void(std::size_t, std::size_t, const std::string&)> progress;
};

// Tolerance against a golden file, which may come from another build, BLAS
// or thread count: loss to 1e-5 relative, gradients to 1e-4 relative.
constexpr double kGoldenLossTolerance = 1e-5, kGoldenGradTolerance = 1e-4;

// Host copies of every parameter's gradient.
std::vector<std::vector<float>> gradients(const ParamStore& params);
void gradients(const ParamStore& params, std::vector<std::vector<float>>& into);  // reusing into's buffers
// Relative errors are per tensor, against its largest reference magnitude,
// but never against less than `floor` times the model's largest gradient
// (a gradient that is zero in exact arithmetic has no scale of its own).
GradientComparison compare_gradients(const ParamStore& params, const std::vector<std::vector<float>>& got,
                                     const std::vector<std::vector<float>>& reference, double loss,
                                     double reference_loss, double floor = 0);


struct CheckReport {
  StepResult full;  // the reference step
  std::vector<CheckRow> rows;
};


// Why `strategy` is `full` in all but name on this step, or "" when it is
// not: it kept full's peak, moved nothing and ran no op again. (Megatron's
// selective:attn-core under the fused attention, which keeps no scores.)
std::string same_as_full(const std::string& strategy, const StepResult& step, const StepResult& full,
                         ops::AttentionKernel attention);

// Runs `full`, then each strategy, one step each, on the same weights and batch.
CheckReport run_check(const Model& model, const ParamStore& params, const Batch& batch,
                                const std::vector<std::string>& strategies, const CheckOptions& options);

}  // namespace remat
