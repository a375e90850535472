#pragma once
// Gradient equivalence and memory of strategies against `full`, on the same
// weights and batch: what `remat check` prints and the tests assert.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/step.hpp"
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
  std::optional<ReconstructionError> reconstruction;  // reversible: rebuilt vs true block inputs
  std::string trace;           // per-region trace, if asked
  bool oom = false;            // the step passed --mem-limit: nothing else in the row holds
};

// Runs `fn` under the tracker's memory limit; false if it ran out of memory,
// over the limit or for real (a failed device allocation), and the partial
// graph is dropped.
bool within_limit(std::int64_t limit, const std::function<void()>& fn);

struct CheckOptions {
  std::uint64_t seed = 1;
  bool trace = false;
  bool timeline = false;  // record each strategy's memory timeline
  const std::vector<std::vector<float>>* golden = nullptr;  // compare every strategy with these gradients too
  double golden_loss = 0;
  std::int64_t mem_limit = 0;  // cap on the device pool during each strategy's steps (0: none)
  ops::AttentionKernel attention = ops::AttentionKernel::fused;
  const SaveProfile* costs = nullptr;  // a timed profile for planned strategies (measured if needed and null)
  // Called before each strategy's step (index, count, spec).
  std::function<void(std::size_t, std::size_t, const std::string&)> progress;
};

// Tolerance against a golden file, which may come from another build, BLAS
// or thread count: loss to 1e-5 relative, gradients to 1e-4 relative.
constexpr double kGoldenLossTolerance = 1e-5, kGoldenGradTolerance = 1e-4;

// Host copies of every parameter's gradient.
std::vector<std::vector<float>> gradients(const ParamStore& params);
// Relative errors are per tensor, against its largest reference magnitude,
// but never against less than `floor` times the model's largest gradient
// (a gradient that is zero in exact arithmetic has no scale of its own).
GradientComparison compare_gradients(const ParamStore& params, const std::vector<std::vector<float>>& got,
                                     const std::vector<std::vector<float>>& reference, double loss,
                                     double reference_loss, double floor = 0);

// What the model saves, per block, and the step's working set, from one
// probe step (forward and backward, everything kept).
SaveProfile profile_saves(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention = ops::AttentionKernel::fused);

// A timed profile for planned strategies (budget:<size>): profile_saves, a
// step under `full` timed `repeats` times (its median time and measured
// activation peak), and each block's forward and each recipe timed as many
// times (medians).
SaveProfile measure_costs(const Model& model, const ParamStore& params, const Batch& batch,
                          ops::AttentionKernel attention, std::uint64_t seed, int repeats = 3);

// Plans `strategy` if it needs costs, measuring them unless `costs` (a timed
// profile of the same model, weights and batch) is given.
void prepare_strategy(Strategy& strategy, const Model& model, const ParamStore& params, const Batch& batch,
                      ops::AttentionKernel attention, std::uint64_t seed, const SaveProfile* costs = nullptr);

struct CheckReport {
  StepResult full;  // the reference step
  std::vector<CheckRow> rows;
};

// The tags a model's saved tensors carry with this attention kernel, from a
// small probe forward (tiny sizes, with dropout).
std::vector<std::string> tags_produced(const std::string& model, ops::AttentionKernel kernel);

// The strategies `list` names for this model ("all" includes reversible for
// a reversible model); UserError for one that does not apply to it, or that
// names a tag the model does not produce (listing those it does).
std::vector<std::string> strategies_for(const std::string& model, const std::string& list,
                                        ops::AttentionKernel kernel = ops::AttentionKernel::fused);

// Runs `full`, then each strategy, one step each, on the same weights and batch.
CheckReport run_check(const Model& model, const ParamStore& params, const Batch& batch,
                                const std::vector<std::string>& strategies, const CheckOptions& options);

}  // namespace remat
