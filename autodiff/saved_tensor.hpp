#pragma once
// Saved-tensor hooks: every op saves what its backward needs through the
// innermost active hooks instead of holding it directly. The default keeps
// the tensor; a strategy may drop it (recompute later), move it (offload) or
// rebuild it (reversible). This is the one seam between ops and strategies.
#include <functional>
#include <memory>

#include "autodiff/tensor.hpp"

namespace remat {

// What a hook made of a tensor; unpack() returns it (possibly recomputed or
// copied back), with the same shape and dtype as the tensor that was packed.
class Packed {
 public:
  virtual ~Packed() = default;
  virtual Tensor unpack() = 0;
};

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  virtual std::shared_ptr<Packed> pack(const Tensor& t) = 0;
};

// The handle an op's backward holds.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(std::shared_ptr<Packed> p) : packed_(std::move(p)) {}
  Tensor unpack() const { return packed_ ? packed_->unpack() : Tensor(); }

 private:
  std::shared_ptr<Packed> packed_;
};

// Keeps the tensor itself: the `full` strategy, and the default.
class KeepHooks final : public SavedTensorHooks {
 public:
  std::shared_ptr<Packed> pack(const Tensor& t) override;
};

// Saves `t` through the innermost active hooks. It may throw: a
// recomputation stops at its last save by throwing (strategies/
// recompute_region.cpp). So an op saves into named locals, never inside a
// temporary (a backward closure's init-capture, a braced list): nvcc
// (11.8 to 13.0) leaks what a temporary had already built when an exception
// leaves its construction, which on a GPU kept each bert block's recomputed
// LayerNorm input past its backward. tests/test_layering.cpp holds ops to it.
SavedTensor save(const Tensor& t);

// An op that does not save `t` although it reads it in forward, and why
// ("its weight is frozen"): said to the innermost SaveNotes, if any (a
// strategy's --trace), so a trace shows what was left out as well as what
// was kept.
void note_not_saved(const char* op, const Tensor& t, const char* why);
class SaveNotes {
 public:
  virtual ~SaveNotes() = default;
  virtual void not_saved(const char* op, const Tensor& t, const char* why) = 0;
};
class SaveNotesScope {
 public:
  explicit SaveNotesScope(SaveNotes& notes);
  ~SaveNotesScope();
  SaveNotesScope(const SaveNotesScope&) = delete;
  SaveNotesScope& operator=(const SaveNotesScope&) = delete;

 private:
  SaveNotes* previous_;
};

// The op that is saving right now (for traces and error messages).
const char* current_op();
class CurrentOpScope {
 public:
  explicit CurrentOpScope(const char* op);
  ~CurrentOpScope();
  CurrentOpScope(const CurrentOpScope&) = delete;
  CurrentOpScope& operator=(const CurrentOpScope&) = delete;

 private:
  const char* previous_;
};

// Runs a tensor's recipe (see Tensor::recipe) as recomputation: no tape, no
// saving, counted as recomputed work.
Tensor run_recipe(const Tensor::Recipe& recipe);

// Makes `hooks` the innermost hooks for the scope's lifetime.
class SavedTensorHooksScope {
 public:
  explicit SavedTensorHooksScope(SavedTensorHooks& hooks);
  ~SavedTensorHooksScope();
  SavedTensorHooksScope(const SavedTensorHooksScope&) = delete;
  SavedTensorHooksScope& operator=(const SavedTensorHooksScope&) = delete;
};

}  // namespace remat
