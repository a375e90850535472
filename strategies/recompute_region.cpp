#include "strategies/recompute_region.hpp"

#include <algorithm>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat {
namespace {

class RecipePacked final : public Packed {
 public:
  RecipePacked(std::shared_ptr<const Tensor::Recipe> recipe, const Tensor& t, std::string where, RegionTrace* trace)
      : recipe_(std::move(recipe)), shape_(t.shape()), dtype_(t.dtype()), where_(std::move(where)), trace_(trace) {}
  Tensor unpack() override {
    if (!value_.defined()) {
      const auto before = trace_ ? stats::counts().forward : std::map<std::string, std::int64_t>{};
      value_ = run_recipe(*recipe_);
      // The trace's "recomputed" line counts what the recipe ran, as it
      // counts a region's re-run.
      if (trace_)
        for (const auto& [op, n] : stats::forward_since(before)) trace_->recomputed_ops[op] += n;
      if (value_.shape() != shape_ || value_.dtype() != dtype_)
        throw RecomputeMismatch(where_ + ": recomputed " + to_string(value_.shape()) + " " + dtype_name(value_.dtype()) +
                                ", forward saved " + to_string(shape_) + " " + dtype_name(dtype_));
    }
    return value_;
  }

 private:
  std::shared_ptr<const Tensor::Recipe> recipe_;
  Shape shape_;
  DType dtype_;
  std::string where_;
  RegionTrace* trace_;  // null: not traced
  Tensor value_;
};

// What a sub-segment's blocks save while the region around it is recomputed:
// nothing (that scratch graph never runs backward).
class Discarded final : public Packed {
 public:
  Tensor unpack() override { throw std::logic_error("a tensor discarded during a recomputation was unpacked"); }
};
class DiscardHooks final : public SavedTensorHooks {
 public:
  std::shared_ptr<Packed> pack(const Tensor&) override { return std::make_shared<Discarded>(); }
};

struct StopRecompute {};  // thrown once a span's last placeholder is filled: the rest need not run

// The value alone: no gradient slot, no recipe (which could hold other tensors alive).
Tensor value_of(const Tensor& t) { return t.view_as(t.shape()); }

}  // namespace

std::shared_ptr<Packed> recompute_later(const Tensor& t, std::string where, RegionTrace* trace) {
  return std::make_shared<RecipePacked>(t.recipe(), t, std::move(where), trace);
}

// A stretch of the region's blocks recomputed together: the whole region, or
// a sub-segment of a span around it.
struct RecomputeRegion::Span {
  std::string name;
  std::size_t first_body = 0, last_body = 0;  // inclusive (the root's last is the region's last)
  std::uint64_t cursor = 0;                   // random-op cursor at its first block
  std::shared_ptr<const Policy> policy;       // runs its recomputation (null: keep everything)
  Tensors inputs;                             // sub-segments: their inputs' values
  std::vector<bool> requires_grad;
  bool recomputed = false;
  std::vector<std::unique_ptr<Span>> children;
};

class RegionPlaceholder final : public Packed {
 public:
  RegionPlaceholder(std::shared_ptr<RecomputeRegion> r, std::size_t i) : region_(std::move(r)), index_(i) {}
  ~RegionPlaceholder() override {
    if (!value_.defined()) region_->abandon(index_);
  }
  Tensor unpack() override {
    if (!value_.defined()) {
      region_->fill(index_);
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
    if (!region_.inputs_saved_) region_.save_inputs(region_.pending_);
    region_.slots_.push_back({t.shape(), t.dtype(), current_op(), Tensor(), nullptr});
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

// Recomputation of one block: fill its placeholders in save order, checking
// each, or leave one to its recipe where the span's policy drops it.
class CaptureHooks final : public SavedTensorHooks {
 public:
  CaptureHooks(RecomputeRegion& r, const RecomputeRegion::Span& span, const BlockInfo& info, const Tensors& inputs,
               std::size_t first, std::size_t end, bool stop_when_full)
      : region_(r), span_(span), info_(info), inputs_(inputs), next_(first), end_(end), stop_(stop_when_full) {}
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    auto& slots = region_.slots_;
    if (next_ >= end_)
      throw RecomputeMismatch("region " + region_.name_ + ": recomputing block " + info_.name +
                              " saved more tensors than its forward pass, the extra one in op '" + current_op() + "'");
    auto& s = slots[next_];
    if (t.shape() != s.shape || t.dtype() != s.dtype || std::string(current_op()) != s.op)
      throw RecomputeMismatch("region " + region_.name_ + ": saved tensor #" + std::to_string(next_) + " was " +
                              s.op + " " + to_string(s.shape) + " " + dtype_name(s.dtype) + " in forward but " +
                              current_op() + " " + to_string(t.shape()) + " " + dtype_name(t.dtype()) +
                              " when recomputed (is the block deterministic?)");
    const bool input = std::any_of(inputs_.begin(), inputs_.end(), [&](const Tensor& x) { return x.id() == t.id(); });
    const SavedTensorInfo info{t.tag(), info_, t.shape(), std::int64_t(t.nbytes()), t.recipe() != nullptr, false, input};
    std::shared_ptr<Packed> packed;
    if (s.abandoned) {  // no handle will read it: the recomputation's own graph may, briefly
      packed = keep_.pack(t);
    } else if (span_.policy && t.recipe() && span_.policy->decision(info) == Decision::recompute) {
      // The recomputation's own recipes that read it read it lazily too, so
      // nothing holds the dropped tensor.
      packed = s.later = recompute_later(t, "block " + info_.name + ", " + t.tag() + " saved by " + current_op(), region_.trace_);
    } else {
      s.value = t.view_as(t.shape());  // the value: its recipe could hold dropped tensors alive
      packed = keep_.pack(s.value);
    }
    if (++next_ == end_ && stop_) throw StopRecompute{};
    return packed;
  }
  std::size_t filled() const { return next_; }

 private:
  RecomputeRegion& region_;
  const RecomputeRegion::Span& span_;
  const BlockInfo& info_;
  const Tensors inputs_;  // the block's, by value: the body replaces the caller's
  std::size_t next_, end_;
  bool stop_;
  KeepHooks keep_;
};

std::shared_ptr<RecomputeRegion> RecomputeRegion::begin(const std::string& name, const Tensors& inputs,
                                                        Storage& storage, RegionTrace* trace,
                                                        std::shared_ptr<const Policy> inner, int context) {
  auto r = std::make_shared<RecomputeRegion>();
  r->name_ = name;
  r->context_count_ = context;
  r->trace_ = trace;
  r->root_ = std::make_unique<Span>();
  r->root_->name = name;
  r->root_->cursor = random_ops::cursor();
  r->root_->policy = std::move(inner);
  r->storage_ = &storage;
  if (std::any_of(inputs.begin(), inputs.end(), [](const Tensor& x) { return x.requires_grad(); }))
    r->save_inputs(inputs);
  return r;
}

void RecomputeRegion::save_inputs(const Tensors& inputs) {
  inputs_saved_ = true;
  storage_->begin_group(name_, trace_);
  {
    SavedTensorHooksScope hooks(*storage_);
    CurrentOpScope op("region input");
    const std::size_t carried = inputs.size() - std::size_t(context_count_);
    for (std::size_t i = 0; i < carried; ++i) {
      const Tensor& x = inputs[i];
      inputs_.push_back(save(x));
      input_shapes_.push_back(x.shape());
      input_requires_grad_.push_back(x.requires_grad());
    }
    context_.assign(inputs.begin() + std::ptrdiff_t(carried), inputs.end());
  }
  storage_->end_group();
  pending_.clear();
}

Tensors RecomputeRegion::run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) {
  if (!inputs_saved_) {  // nothing saved so far: the region starts at this block
    bodies_.clear();
    infos_.clear();
    first_slot_.clear();
    root_->cursor = random_ops::cursor();
    pending_ = inputs;
  }
  bodies_.push_back(body);
  infos_.push_back(info);
  first_slot_.push_back(slots_.size());
  root_->first_body = 0;
  root_->last_body = bodies_.size() - 1;
  Tensors out;
  {
    RegionHooks hooks(*this);
    SavedTensorHooksScope scope(hooks);
    out = body(inputs);
  }
  if (!inputs_saved_) {  // it saved nothing: it needs nothing kept
    pending_.clear();
    if (trace_)
      trace_->saves.push_back("block " + info.name +
                              ": skipped by the region: saves nothing (no input or parameter needs a gradient), so "
                              "nothing kept and nothing recomputed");
  }
  return out;
}

void RecomputeRegion::fill(std::size_t index) {
  const auto end_of = [this](std::size_t body) { return body + 1 < first_slot_.size() ? first_slot_[body + 1] : slots_.size(); };
  Span* span = root_.get();
  for (;;) {
    if (!span->recomputed) recompute(*span);
    if (slots_[index].value.defined() || slots_[index].later || slots_[index].abandoned) return;
    Span* inner = nullptr;
    for (auto& c : span->children)
      if (first_slot_[c->first_body] <= index && index < end_of(c->last_body)) inner = c.get();
    if (!inner)
      throw RecomputeMismatch("region " + name_ + ": saved tensor #" + std::to_string(index) +
                              " was not filled by recomputing " + span->name);
    span = inner;
  }
}

// The inputs a span's recomputation starts from, as leaves whose gradients
// backward will ask for: the region's saved inputs (and its context) for the
// root, a sub-segment's kept inputs otherwise.
Tensors RecomputeRegion::span_inputs(const Span& span) {
  const bool root = &span == root_.get();
  Tensors x;
  for (std::size_t i = 0; i < (root ? inputs_.size() : span.inputs.size()); ++i) {
    Tensor t = root ? inputs_[i].unpack().view_as(input_shapes_[i]) : span.inputs[i];
    if (root ? input_requires_grad_[i] : span.requires_grad[i]) {
      auto slot = std::make_shared<GradSlot>();
      slot->shape = t.shape();
      slot->dtype = t.dtype();
      t.attach_slot(slot);
    }
    x.push_back(t);
  }
  if (root) x.insert(x.end(), context_.begin(), context_.end());
  return x;
}

// A sub-segment of `span` from block k under `seg`, keeping its input `x`
// (recomputed again when its backward comes); returns its last block.
std::size_t RecomputeRegion::open_sub_span(Span& span, std::size_t k, const Segment& seg, const Tensors& x) {
  auto child = std::make_unique<Span>();
  child->first_body = child->last_body = k;
  while (child->last_body < span.last_body && infos_[child->last_body + 1].index <= seg.last) ++child->last_body;
  child->name = span.name + "/" + (child->first_body == child->last_body
                                       ? infos_[k].name
                                       : infos_[child->first_body].name + "-" + infos_[child->last_body].name);
  child->cursor = random_ops::cursor();
  child->policy = seg.inner;
  for (const auto& t : x) {
    child->inputs.push_back(value_of(t));
    child->requires_grad.push_back(t.requires_grad());
  }
  const std::size_t last = child->last_body;
  span.children.push_back(std::move(child));
  return last;
}

void RecomputeRegion::recompute(Span& span) {
  span.recomputed = true;
  const auto end_of = [this](std::size_t body) { return body + 1 < first_slot_.size() ? first_slot_[body + 1] : slots_.size(); };
  MemoryPhase phase("recompute " + span.name);
  stats::RecomputeScope recomputing;
  EnableGradScope recording;  // backward may get here from inside a recipe's unrecorded run
  const auto before = stats::counts().forward;
  // Nodes made while recomputing go to a scratch tape and are dropped: only
  // the saved tensors are wanted.
  Tape scratch;
  TapeScope tape(scratch);
  struct RestoreCursor {
    std::uint64_t cursor = random_ops::cursor();
    ~RestoreCursor() { random_ops::set_cursor(cursor); }
  } restore;
  random_ops::set_cursor(span.cursor);

  const bool root = &span == root_.get();
  Tensors x = span_inputs(span);
  for (std::size_t k = span.first_body; k <= span.last_body; ++k) {
    const BlockInfo& info = infos_[k];
    if (const auto seg = span.policy ? span.policy->segment_of(info) : std::nullopt) {
      // A sub-segment from block k: keep its input, skip its saves.
      const std::size_t last = open_sub_span(span, k, *seg, x);
      if (last == span.last_body) break;  // it ends the span: its blocks run when it is recomputed
      DiscardHooks discard;
      SavedTensorHooksScope hooks(discard);
      for (; k <= last; ++k) x = bodies_[k](x);
      k = last;
      continue;
    }
    const bool last = k == span.last_body;
    CaptureHooks capture(*this, span, info, x, first_slot_[k], end_of(k), last);
    {
      SavedTensorHooksScope hooks(capture);
      try {
        x = bodies_[k](x);
      } catch (const StopRecompute&) {
      }
    }
    if (capture.filled() != end_of(k))
      throw RecomputeMismatch("region " + name_ + ": recomputing block " + info.name + " saved " +
                              std::to_string(capture.filled() - first_slot_[k]) + " tensors, the forward pass " +
                              std::to_string(end_of(k) - first_slot_[k]));
  }
  if (root) inputs_.clear(), context_.clear();  // nothing needs them any more
  span.inputs.clear();
  if (trace_)
    for (const auto& [op, n] : stats::forward_since(before)) trace_->recomputed_ops[op] += n;
}

void RecomputeRegion::abandon(std::size_t index) {
  Slot& s = slots_[index];
  s.abandoned = true;
  s.value = Tensor();
  s.later.reset();
}

Tensor RecomputeRegion::take(std::size_t index) {
  Slot& s = slots_[index];
  Tensor t = s.later ? s.later->unpack() : s.value;
  s.value = Tensor();  // the consumer owns it now
  s.later.reset();
  return t;
}

}  // namespace remat
