#pragma once
// A strategy decides, block by block, what the ops' saved tensors become:
// kept, dropped and recomputed, moved to the offload pool, or rebuilt. It is
// a BlockRunner (models mark blocks, strategies run them) and knows nothing
// of any model. Nearly every strategy is a Policy (strategies/policy.hpp)
// run by one engine (PolicyStrategy); one with a mechanism of its own
// (reversible) is its own BlockRunner. Make one with make_strategy(spec)
// (strategies/registry.hpp).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "strategies/profile.hpp"
#include "strategies/trace.hpp"

namespace remat {

// How far rebuilt block inputs are from the true ones (reversible).
struct ReconstructionError {
  double max_abs = 0, max_rel = 0;  // worst block; relative to the inputs' largest magnitude
  std::string block;
};

// What a strategy's registry entry may ask of the model it would run.
struct ModelTraits {
  bool reversible = false;  // its blocks are reversible couplings
};

class Strategy : public BlockRunner {
 public:
  explicit Strategy(std::string spec) : spec_(std::move(spec)) {}
  const std::string& spec() const { return spec_; }
  // Same operations in the same order as `full`, hence bitwise-equal
  // gradients (set from the registry entries the spec names).
  bool exact() const { return exact_; }
  // The bytes this strategy keeps at its peak for a model that saves `p`
  // (activations only: the harness adds the working set of one block).
  virtual MemoryPrediction predict(const SaveProfile& p) const = 0;
  // Call before each forward: clears per-step state and the trace.
  void begin_step();
  // The forward's blocks are done (the model's last block does it itself):
  // offload copies still in flight are waited for and their device tensors
  // let go, as at the end of a whole model's forward. A pipeline stage
  // calls it after its chunk (pipeline/stage_runner.hpp).
  virtual void forward_over() {}

  // Planned strategies (budget:<size>) are planned from a timed probe of the
  // model (SaveProfile::timed, harness measure_costs) before their first
  // step: the harness asks needs_costs() and calls plan(). Others need none.
  virtual bool needs_costs() const { return false; }
  virtual void plan(const SaveProfile& timed) { (void)timed; }
  // A promise on the measured activation peak (0: none); run_step checks it.
  virtual std::int64_t activation_budget() const { return 0; }
  // What the strategy decided for this model, when it planned (for `check --trace`).
  virtual std::string plan_summary() const { return ""; }
  // How often backward runs the block's body again: once per checkpoint
  // segment around it that recomputes (nested segments each run it again).
  // What sharded parameters gather once more for.
  virtual int reruns(const BlockInfo& block) const {
    (void)block;
    return 0;
  }

  // Diagnostics, provided here for every strategy.
  // The trace of the last step, when enabled (`remat check --trace`).
  Trace& trace() { return trace_; }
  // With verify on, a strategy that reconstructs tensors keeps the true ones
  // too (costs memory: off when measuring) and reports each block's error:
  // the worst, and every block's in forward order.
  void set_verify(bool on) { verify_ = on; }
  const std::optional<ReconstructionError>& reconstruction() const { return reconstruction_; }
  std::vector<ReconstructionError> reconstruction_by_block() const {
    return {by_block_.rbegin(), by_block_.rend()};  // reported in backward's order
  }

 protected:
  virtual void reset() {}
  bool verifying() const { return verify_; }
  void report_reconstruction(const ReconstructionError& e);  // one block's, in backward order
  // Runs `fn`, adding the ops it ran forward to `trace` (if tracing).
  Tensors run_traced(RegionTrace* trace, const std::function<Tensors()>& fn);
  RegionTrace* trace_region(const std::string& name) { return trace_.enabled ? &trace_.region(name) : nullptr; }

 private:
  friend std::unique_ptr<Strategy> make_strategy(const std::string& spec, const class StrategyRegistry& registry);
  std::string spec_;
  bool exact_ = true;
  Trace trace_;
  bool verify_ = false;
  std::optional<ReconstructionError> reconstruction_;
  std::vector<ReconstructionError> by_block_;
};

// The offload pool's live and peak bytes as the memory tracker counts them
// (the harness reports them beside the device pool's).
struct PoolBytes {
  std::int64_t live = 0, peak = 0;
};
PoolBytes offload_pool_bytes();

}  // namespace remat
