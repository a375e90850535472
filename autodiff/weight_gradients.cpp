#include "autodiff/weight_gradients.hpp"

#include <map>

#include "autodiff/memory_tracker.hpp"

namespace remat {
namespace {

DeferredWeightGradients*& current() {
  thread_local DeferredWeightGradients* d = nullptr;
  return d;
}

bool is_parameter(const std::shared_ptr<GradSlot>& s) { return s && !s->name.empty(); }

// Runs n's backward with only the inputs `keep` says (the others hidden),
// then frees its outputs' gradients.
template <class Keep>
void run_part(Node& n, const Keep& keep) {
  std::vector<std::shared_ptr<GradSlot>> all = n.inputs;
  bool any = false;
  for (auto& s : n.inputs) {
    if (s && !keep(s)) s = nullptr;
    any = any || s;
  }
  if (any && BackwardContext::reached(n)) {
    BackwardContext ctx(n);
    n.backward(ctx);
  }
  n.inputs = std::move(all);
}

void free_output_grads(Node& n) {
  for (auto& s : n.outputs)
    if (s && !s->retain) s->grad.reset();
}

}  // namespace

bool DeferredWeightGradients::takes(const Node& n) const {
  for (const auto& s : n.inputs)
    if (is_parameter(s)) return true;
  return false;
}

void DeferredWeightGradients::take(std::unique_ptr<Node> n) {
  if (!BackwardContext::reached(*n)) return;  // nothing flows here (as backward skips it)
  Item item;
  if (n->weight_grads_apart) {
    run_part(*n, [](const std::shared_ptr<GradSlot>& s) { return !is_parameter(s); });
    item.node = std::move(n);  // its outputs' gradients kept for W
  } else {
    // Each parameter's gradient into a buffer of its own (one per slot: an
    // op reading one tensor twice writes one gradient).
    std::map<const GradSlot*, std::shared_ptr<GradSlot>> buffer_of;
    for (auto& s : n->inputs) {
      if (!is_parameter(s)) continue;
      std::shared_ptr<GradSlot>& b = buffer_of[s.get()];
      if (!b) {
        b = std::make_shared<GradSlot>();
        b->shape = s->shape;
        b->dtype = s->dtype;
        item.buffered.emplace_back(s, b);
      }
      s = b;
    }
    BackwardContext ctx(*n);  // (reached: checked above)
    n->backward(ctx);
    free_output_grads(*n);
  }
  items_.push_back(std::move(item));
}

void DeferredWeightGradients::run() {
  MemoryPhase phase("weight gradients");
  for (Item& item : items_) {
    if (item.node) {
      run_part(*item.node, is_parameter);
      free_output_grads(*item.node);
      item.node.reset();  // what it saved goes now
    }
    for (auto& [parameter, buffer] : item.buffered)
      if (buffer->grad) accumulate_grad(*parameter, *buffer->grad, "weight gradient");
    item.buffered.clear();
  }
  items_.clear();
}

DeferWeightGradientsScope::DeferWeightGradientsScope(DeferredWeightGradients& d) : previous_(current()) {
  current() = &d;
}
DeferWeightGradientsScope::~DeferWeightGradientsScope() { current() = previous_; }
DeferredWeightGradients* deferred_weight_gradients() { return current(); }

}  // namespace remat
