#include "strategies/strategy.hpp"

#include "autodiff/stats.hpp"

namespace remat {

Strategy::Strategy(std::string spec, bool offload) : spec_(std::move(spec)) {
  if (offload) storage_ = std::make_unique<OffloadStorage>();
}

void Strategy::begin_step() {
  trace_.clear();
  device_.reset();
  if (storage_) storage_->reset();
  reset();
}

Tensors Strategy::run_traced(RegionTrace* trace, const std::function<Tensors()>& fn) {
  if (!trace) return fn();
  const auto before = stats::counts().forward;
  Tensors out = fn();
  for (const auto& [op, n] : stats::forward_since(before)) trace->forward_ops[op] += n;
  return out;
}

Tensors Strategy::run_stored(Storage& storage, const BlockInfo& info, const Tensors& inputs, const BlockBody& body) {
  RegionTrace* trace = trace_region(info.name);
  storage.begin_group(info.name, trace);
  Tensors out = run_traced(trace, [&] {
    SavedTensorHooksScope hooks(storage);
    return body(inputs);
  });
  storage.end_group();
  return out;
}

}  // namespace remat
