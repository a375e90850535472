#include "strategies/strategy.hpp"

#include "autodiff/memory_tracker.hpp"
#include "autodiff/stats.hpp"
#include "strategies/storage.hpp"

namespace remat {

void Strategy::begin_step() {
  trace_.clear();
  reconstruction_.reset();
  by_block_.clear();
  reset();
}

void Strategy::report_reconstruction(const ReconstructionError& e) {
  if (!reconstruction_ || e.max_rel > reconstruction_->max_rel) reconstruction_ = e;
  by_block_.push_back(e);
}

namespace {

// What ops leave out, into the region's trace beside what they keep.
class TraceNotes final : public SaveNotes {
 public:
  explicit TraceNotes(RegionTrace& t) : trace_(t) {}
  void not_saved(const char* op, const Tensor& t, const char* why) override {
    trace_.saves.push_back(std::string(op) + ": not saved " + t.tag() + " " + to_string(t.shape()) + " " +
                           human_bytes(double(t.nbytes())) + " (" + why + ")");
  }

 private:
  RegionTrace& trace_;
};

}  // namespace

Tensors Strategy::run_traced(RegionTrace* trace, const std::function<Tensors()>& fn) {
  if (!trace) return fn();
  const auto before = stats::counts().forward;
  TraceNotes notes(*trace);
  SaveNotesScope scope(notes);
  Tensors out = fn();
  for (const auto& [op, n] : stats::forward_since(before)) trace->forward_ops[op] += n;
  return out;
}

PoolBytes offload_pool_bytes() {
  const auto s = MemoryTracker::instance().stats(OffloadStorage::kPool);
  return {s.live, s.peak};
}

}  // namespace remat
