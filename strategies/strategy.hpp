#pragma once
// A strategy decides, block by block, what the ops' saved tensors become:
// kept, dropped and recomputed, moved to the offload pool, or rebuilt. It is
// a BlockRunner (models mark blocks, strategies run them) and knows nothing
// of any model. Make one with make_strategy(spec) (strategies/registry.hpp).
#include <memory>
#include <optional>
#include <string>

#include "autodiff/region.hpp"
#include "strategies/profile.hpp"
#include "strategies/storage.hpp"
#include "strategies/trace.hpp"

namespace remat {

// How far rebuilt block inputs are from the true ones (reversible).
struct ReconstructionError {
  double max_abs = 0, max_rel = 0;  // worst block; relative to the inputs' largest magnitude
  std::string block;
};

class Strategy : public BlockRunner {
 public:
  Strategy(std::string spec, bool offload);
  const std::string& spec() const { return spec_; }
  // Same operations in the same order as `full`, hence bitwise-equal
  // gradients (every strategy but reversible).
  virtual bool exact() const { return true; }
  // Applies only to models whose blocks are reversible.
  virtual bool needs_reversible_model() const { return false; }
  // Diagnostics of reconstructing strategies: keep the true inputs (costs
  // memory, so off when measuring) and report the worst reconstruction.
  virtual void set_verify(bool) {}
  virtual std::optional<ReconstructionError> reconstruction() const { return std::nullopt; }
  // The bytes this strategy keeps at its peak for a model that saves `p`
  // (activations only: the harness adds the working set of one block).
  virtual MemoryPrediction predict(const SaveProfile& p) const = 0;
  // Call before each forward: clears per-step state and the trace.
  void begin_step();
  Trace& trace() { return trace_; }

 protected:
  virtual void reset() {}
  // Runs a block saving through `storage` (one group per block).
  Tensors run_stored(Storage& storage, const BlockInfo& info, const Tensors& inputs, const BlockBody& body);
  // Runs `fn`, adding the ops it ran forward to `trace` (if tracing).
  Tensors run_traced(RegionTrace* trace, const std::function<Tensors()>& fn);
  RegionTrace* trace_region(const std::string& name) { return trace_.enabled ? &trace_.region(name) : nullptr; }
  Storage& storage() { return storage_ ? *storage_ : device_; }

  std::string spec_;
  KeepStorage device_;
  std::unique_ptr<Storage> storage_;  // device_ or an offload pool: where kept tensors go
  Trace trace_;
};

}  // namespace remat
