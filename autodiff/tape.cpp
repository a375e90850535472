#include "autodiff/tape.hpp"

#include "autodiff/elementwise.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/region.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/weight_gradients.hpp"

namespace remat {
namespace {

Tape*& tape_pointer() {
  thread_local Tape default_tape;
  thread_local Tape* current = &default_tape;
  return current;
}

bool& grad_flag() {
  thread_local bool enabled = true;
  return enabled;
}

// A slot's gradient may share storage with another slot's (a gradient handed
// on unchanged, as by add). Before writing into it in place, make it ours.
Tensor& writable_grad(GradSlot& slot) {
  Tensor& g = *slot.grad;
  if (g.shares_storage()) g = clone(g);
  return g;
}

}  // namespace

Tensor BackwardContext::grad_out(int i) const {
  const auto& slot = node_.outputs.at(i);
  return slot && slot->grad ? *slot->grad : Tensor();
}

GradTarget BackwardContext::grad_in(int i) {
  GradSlot* slot = node_.inputs.at(i).get();
  if (!slot) return {};
  for (const auto& [s, t] : handed_out_)  // the same tensor as an earlier input: share its buffer
    if (s == slot) return {t, false};
  GradTarget target;
  if (!slot->grad) {
    slot->grad = std::make_shared<Tensor>(Tensor::empty(slot->shape, slot->dtype, slot->grad_label ? slot->grad_label : "grad"));
    target = {*slot->grad, true};
  } else {
    target = {writable_grad(*slot), false};
  }
  handed_out_.emplace_back(slot, target.t);
  return target;
}

void BackwardContext::accumulate(int i, const Tensor& g) {
  if (GradSlot* slot = node_.inputs.at(i).get()) accumulate_grad(*slot, g, node_.op);
}

bool BackwardContext::reached(const Node& n) {
  for (const auto& s : n.outputs)
    if (s && s->grad) return true;
  return false;
}

void accumulate_grad(GradSlot& target, const Tensor& g, const char* op) {
  GradSlot* slot = &target;
  if (g.shape() != slot->shape)
    throw std::logic_error(std::string(op) + ": gradient of shape " + to_string(g.shape()) +
                           " for an input of shape " + to_string(slot->shape));
  if (!slot->grad && (slot->grad_label || g.dtype() != slot->dtype)) {
    // The slot's own label (its own pool) or its own type (a 16-bit copy of
    // a parameter: the float32 master gradient): a copy, not g's buffer.
    slot->grad = std::make_shared<Tensor>(
        Tensor::empty(slot->shape, slot->dtype, slot->grad_label ? slot->grad_label : "grad"));
    if (g.dtype() == slot->dtype) {
      if (!shape_only()) Kokkos::deep_copy(slot->grad->bytes(), g.bytes());
    } else {
      convert_into(*slot->grad, g);
    }
  } else if (!slot->grad) {
    slot->grad = std::make_shared<Tensor>(g);
  } else {
    add_inplace(writable_grad(*slot), g);
  }
}

void Tape::run_backward() {
  // A backward that fails (a recompute mismatch, a bad input) loses the step;
  // it must not leave half a graph for the next one.
  struct ClearOnError {
    std::vector<std::unique_ptr<Node>>& nodes;
    ~ClearOnError() { nodes.clear(); }
  } clear{nodes_};
  // The memory timeline names the block each node belongs to.
  MemoryPhase phase("backward");
  // Block hooks hear of blocks entered and left; a backward nested in a
  // node's (a checkpoint region recomputing) enters its blocks too, but only
  // the outermost one ends.
  thread_local int depth = 0;
  struct Depth {
    Depth() { ++depth; }
    ~Depth() { --depth; }
  } nested;
  BlockHooks* hooks = block_hooks();
  std::string block = "\n", entered;  // no block has the first name; entered: the last block run
  while (!nodes_.empty()) {
    std::unique_ptr<Node> node = std::move(nodes_.back());
    nodes_.pop_back();
    if (block != node->block) {
      block = node->block;
      MemoryTracker::instance().set_phase(block.empty() ? "backward" : "backward " + block);
      if (hooks && !block.empty()) {
        if (!entered.empty() && entered != block) hooks->backward_leave(entered);
        entered = block;
      }
    }
    // Before every node, not once per block: a recomputation between two of
    // a block's nodes may have let its parameters go again.
    if (hooks && !block.empty()) hooks->backward_enter(block);
    if (DeferredWeightGradients* deferred = deferred_weight_gradients(); deferred && deferred->takes(*node)) {
      deferred->take(std::move(node));  // runs its part for the activations now, keeps the rest
      continue;
    }
    if (BackwardContext::reached(*node)) {
      BackwardContext ctx(*node);
      node->backward(ctx);
    }
    // The outputs' gradients are complete and consumed: free them now.
    for (auto& s : node->outputs)
      if (s && !s->retain) s->grad.reset();
  }
  if (hooks && depth == 1) hooks->backward_end();
}

Tape& current_tape() { return *tape_pointer(); }
TapeScope::TapeScope(Tape& t) : previous_(tape_pointer()) { tape_pointer() = &t; }
TapeScope::~TapeScope() { tape_pointer() = previous_; }

bool grad_enabled() { return grad_flag(); }
NoGradScope::NoGradScope() : previous_(grad_flag()) { grad_flag() = false; }
NoGradScope::~NoGradScope() { grad_flag() = previous_; }
EnableGradScope::EnableGradScope() : previous_(grad_flag()) { grad_flag() = true; }
EnableGradScope::~EnableGradScope() { grad_flag() = previous_; }

OpRecorder::OpRecorder(const char* op, const std::vector<const Tensor*>& inputs) : op_(op) {
  if (!grad_enabled()) return;
  bool any = false;
  for (const Tensor* t : inputs) any = any || (t && t->requires_grad());
  if (!any) return;
  node_ = std::make_unique<Node>();
  node_->op = op;
  node_->block = current_block();
  for (const Tensor* t : inputs) node_->inputs.push_back(t ? t->slot() : nullptr);
}

void OpRecorder::finish(std::initializer_list<Tensor*> outputs, BackwardFn fn) {
  for (Tensor* t : outputs) {
    auto slot = std::make_shared<GradSlot>();
    slot->shape = t->shape();
    slot->dtype = t->dtype();
    t->attach_slot(slot);
    node_->outputs.push_back(std::move(slot));
  }
  node_->backward = std::move(fn);
  current_tape().push(std::move(node_));
}

void backward(const Tensor& out, const Tensor& grad_out) {
  if (!out.requires_grad()) throw std::invalid_argument("backward: the tensor does not require a gradient");
  backward(*out.slot(), grad_out);
}

void backward(GradSlot& slot, const Tensor& grad_out) { backward({{&slot, grad_out}}); }

void backward(const std::vector<std::pair<GradSlot*, Tensor>>& seeds) {
  for (const auto& [slot, grad_out] : seeds) {
    if (grad_out.shape() != slot->shape)
      throw std::invalid_argument("backward: gradient shape " + to_string(grad_out.shape()) + " for output " +
                                  to_string(slot->shape));
    slot->grad = std::make_shared<Tensor>(grad_out);
  }
  current_tape().run_backward();
}

void backward(const Tensor& loss) {
  if (loss.numel() != 1) throw std::invalid_argument("backward(loss): loss has shape " + to_string(loss.shape()));
  Tensor one = Tensor::empty(loss.shape(), loss.dtype(), "grad_loss");
  fill(one, 1.0);
  backward(loss, one);
}

}  // namespace remat
