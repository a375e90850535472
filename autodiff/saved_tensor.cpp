#include "autodiff/saved_tensor.hpp"

#include <vector>

#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat {
namespace {

// The values alone: not the tensor's gradient slot or its recipe, whose
// closure holds what its producing op saved. A node kept past its
// producer's (a zero-bubble pipeline's weight gradients, set apart until W)
// must not keep those too.
class Kept final : public Packed {
 public:
  explicit Kept(const Tensor& t) : t_(t.defined() ? t.view_as(t.shape()) : t) {}
  Tensor unpack() override { return t_; }

 private:
  Tensor t_;
};

const char*& op_name() {
  thread_local const char* name = "";
  return name;
}

std::vector<SavedTensorHooks*>& hook_stack() {
  thread_local std::vector<SavedTensorHooks*> stack;
  return stack;
}

SaveNotes*& notes() {
  thread_local SaveNotes* n = nullptr;
  return n;
}

}  // namespace

void note_not_saved(const char* op, const Tensor& t, const char* why) {
  if (notes()) notes()->not_saved(op, t, why);
}
SaveNotesScope::SaveNotesScope(SaveNotes& n) : previous_(notes()) { notes() = &n; }
SaveNotesScope::~SaveNotesScope() { notes() = previous_; }

std::shared_ptr<Packed> KeepHooks::pack(const Tensor& t) { return std::make_shared<Kept>(t); }

SavedTensor save(const Tensor& t) {
  static KeepHooks keep;
  auto& stack = hook_stack();
  SavedTensorHooks& hooks = stack.empty() ? keep : *stack.back();
  return SavedTensor(hooks.pack(t));
}

const char* current_op() { return op_name(); }
CurrentOpScope::CurrentOpScope(const char* op) : previous_(op_name()) { op_name() = op; }
CurrentOpScope::~CurrentOpScope() { op_name() = previous_; }

Tensor run_recipe(const Tensor::Recipe& recipe) {
  NoGradScope no_grad;
  stats::RecomputeScope recompute;
  return recipe();
}

SavedTensorHooksScope::SavedTensorHooksScope(SavedTensorHooks& hooks) { hook_stack().push_back(&hooks); }
SavedTensorHooksScope::~SavedTensorHooksScope() { hook_stack().pop_back(); }

}  // namespace remat
