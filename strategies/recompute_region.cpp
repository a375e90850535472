#include "strategies/recompute_region.hpp"

#include "autodiff/memory_tracker.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat {

class RegionPlaceholder final : public Packed {
 public:
  RegionPlaceholder(std::shared_ptr<RecomputeRegion> r, std::size_t i) : region_(std::move(r)), index_(i) {}
  Tensor unpack() override {
    if (!value_.defined()) {
      if (!region_->recomputed_) region_->recompute();
      value_ = region_->take(index_);
    }
    return value_;
  }

 private:
  std::shared_ptr<RecomputeRegion> region_;
  std::size_t index_;
  Tensor value_;
};

// Forward: record what would be saved, keep nothing.
class RegionHooks final : public SavedTensorHooks {
 public:
  explicit RegionHooks(RecomputeRegion& r) : region_(r) {}
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    region_.slots_.push_back({t.shape(), t.dtype(), current_op(), Tensor()});
    if (RegionTrace* tr = region_.trace_) {
      tr->saved += std::int64_t(t.nbytes());
      tr->dropped += std::int64_t(t.nbytes());
      tr->saves.push_back(std::string(current_op()) + ": recompute " + t.tag() + " " +
                          to_string(t.shape()) + " " + human_bytes(double(t.nbytes())));
    }
    return std::make_shared<RegionPlaceholder>(region_.shared_from_this(), region_.slots_.size() - 1);
  }

 private:
  RecomputeRegion& region_;
};

namespace {
struct StopRecompute {};  // thrown once every placeholder is filled: the rest need not run
}  // namespace

// Recomputation: fill the placeholders in save order, checking each.
class CaptureHooks final : public SavedTensorHooks {
 public:
  explicit CaptureHooks(RecomputeRegion& r) : region_(r) {}
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    auto& slots = region_.slots_;
    if (next_ >= slots.size())
      throw RecomputeMismatch("region " + region_.name_ + ": recomputation saved more tensors than the forward pass (" +
                              std::to_string(slots.size()) + "), the extra one in op '" + current_op() + "'");
    auto& s = slots[next_];
    if (t.shape() != s.shape || t.dtype() != s.dtype || std::string(current_op()) != s.op)
      throw RecomputeMismatch("region " + region_.name_ + ": saved tensor #" + std::to_string(next_) + " was " +
                              s.op + " " + to_string(s.shape) + " " + dtype_name(s.dtype) + " in forward but " +
                              current_op() + " " + to_string(t.shape()) + " " + dtype_name(t.dtype()) +
                              " when recomputed (is the block deterministic?)");
    s.value = t;
    if (++next_ == slots.size()) throw StopRecompute{};
    return keep_.pack(t);
  }
  std::size_t filled() const { return next_; }

 private:
  RecomputeRegion& region_;
  std::size_t next_ = 0;
  KeepHooks keep_;
};

std::shared_ptr<RecomputeRegion> RecomputeRegion::begin(const std::string& name, const Tensors& inputs,
                                                        Storage& storage, RegionTrace* trace) {
  auto r = std::make_shared<RecomputeRegion>();
  r->name_ = name;
  r->trace_ = trace;
  r->random_cursor_ = random_ops::cursor();
  storage.begin_group(name, trace);
  {
    SavedTensorHooksScope hooks(storage);
    CurrentOpScope op("region input");
    for (const auto& x : inputs) {
      r->inputs_.push_back(save(x));
      r->input_shapes_.push_back(x.shape());
      r->input_requires_grad_.push_back(x.requires_grad());
    }
  }
  storage.end_group();
  return r;
}

Tensors RecomputeRegion::run(const Tensors& inputs, const BlockBody& body) {
  bodies_.push_back(body);
  RegionHooks hooks(*this);
  SavedTensorHooksScope scope(hooks);
  return body(inputs);
}

void RecomputeRegion::recompute() {
  recomputed_ = true;
  MemoryPhase phase("recompute " + name_);
  stats::RecomputeScope recomputing;
  const auto before = stats::counts().forward;
  // Nodes made while recomputing go to a scratch tape and are dropped: only
  // the saved tensors are wanted.
  Tape scratch;
  TapeScope tape(scratch);
  CaptureHooks capture(*this);
  SavedTensorHooksScope hooks(capture);
  const auto cursor = random_ops::cursor();
  random_ops::set_cursor(random_cursor_);
  try {
    Tensors x;
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      Tensor t = inputs_[i].unpack().view_as(input_shapes_[i]);
      if (input_requires_grad_[i]) {
        auto slot = std::make_shared<GradSlot>();
        slot->shape = t.shape();
        slot->dtype = t.dtype();
        t.attach_slot(slot);
      }
      x.push_back(t);
    }
    for (const auto& body : bodies_) x = body(x);
  } catch (const StopRecompute&) {
  } catch (...) {
    random_ops::set_cursor(cursor);
    throw;
  }
  random_ops::set_cursor(cursor);
  if (capture.filled() != slots_.size())
    throw RecomputeMismatch("region " + name_ + ": recomputation saved " + std::to_string(capture.filled()) +
                            " tensors, the forward pass " + std::to_string(slots_.size()));
  inputs_.clear();  // nothing needs them any more
  if (trace_)
    for (const auto& [op, n] : stats::forward_since(before)) trace_->recomputed_ops[op] += n;
}

Tensor RecomputeRegion::take(std::size_t index) {
  Tensor t = slots_[index].value;
  slots_[index].value = Tensor();  // the consumer owns it now
  return t;
}

}  // namespace remat
