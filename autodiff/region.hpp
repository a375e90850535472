#pragma once
// Blocks: a model marks each of its repeated blocks (a transformer layer) as a
// region, and the active BlockRunner decides how to run it: plainly (the
// default), as a checkpoint segment, offloaded, reversibly. The model never
// knows which; the strategy never knows which model.
#include <functional>
#include <string>
#include <vector>

#include "autodiff/tensor.hpp"

namespace remat {

struct BlockInfo {
  int index = 0;  // 0 .. count-1, in forward order
  int count = 1;  // blocks in the model
  std::string name;  // e.g. "h.3", for traces and errors
  // The last `context` inputs are context: tensors made before the blocks
  // that several blocks read and none changes (an encoder's output, which
  // every decoder block's cross-attention reads). The body hands them on
  // unchanged as its last outputs. Strategies keep a context tensor on the
  // device once, from the first block that reads it: a checkpoint region
  // does not save it as one of its inputs, and no policy drops, recomputes
  // or offloads it, however many blocks save it.
  int context = 0;
  // The first block of a stack whose input is not the previous block's
  // output (a decoder's first block after an encoder's last): no checkpoint
  // segment runs across it, since recomputing a segment feeds each block the
  // outputs of the one before.
  bool new_stack = false;
};

using Tensors = std::vector<Tensor>;
// A block's forward. A strategy may call it again during backward (to
// recompute), so it must not capture by reference anything that lives only
// during the forward pass: capture indices by value, and refer only to the
// model and its parameters, which outlive backward.
using BlockBody = std::function<Tensors(const Tensors&)>;

// The two halves of a reversible block (RevNet coupling):
// y1 = x1 + F(x2), y2 = x2 + G(y1).
struct ReversibleBody {
  std::function<Tensor(const Tensor&)> f;
  std::function<Tensor(const Tensor&)> g;
};

class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  virtual Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) = 0;
  // The default runs the coupling forward like any block.
  virtual Tensors run_reversible(const BlockInfo& info, const Tensor& x1, const Tensor& x2,
                                 const ReversibleBody& body);
};

// Runs a block through the innermost active runner (plainly if none).
Tensors run_block(const BlockInfo& info, const Tensors& inputs, const BlockBody& body);
Tensor run_block(const BlockInfo& info, const Tensor& input, const std::function<Tensor(const Tensor&)>& body);
// Runs a reversible block; returns {y1, y2}.
Tensors run_reversible_block(const BlockInfo& info, const Tensor& x1, const Tensor& x2, const ReversibleBody& body);

// The block whose forward is running ("" outside blocks). Nodes remember it,
// so that the memory timeline labels backward phases by block too.
const std::string& current_block();

// What parameters that are not always resident (sharded across ranks, as in
// ZeRO-3) must know of the blocks: when a run of a block's body ends (its
// forward, or its recomputation in backward), before backward runs each of a
// block's nodes (so it repeats), when backward has left a block for an
// earlier one (its gradients are complete), and when backward ends. None is
// installed by default, and then blocks run exactly as without.
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void body_done(const std::string& block) = 0;
  virtual void backward_enter(const std::string& block) = 0;
  virtual void backward_leave(const std::string& block) = 0;
  virtual void backward_end() = 0;
  // A delayed weight-gradient pass (zb-h1's W, outside any backward's
  // blocks) has made its gradients: complete now, as at a backward's end.
  virtual void weight_gradients_done() {}
};
BlockHooks* block_hooks();  // the innermost scope's; null outside any
// Installs `hooks` for its lifetime (the previous ones come back after).
class BlockHooksScope {
 public:
  explicit BlockHooksScope(BlockHooks* hooks);
  ~BlockHooksScope();
  BlockHooksScope(const BlockHooksScope&) = delete;
  BlockHooksScope& operator=(const BlockHooksScope&) = delete;

 private:
  BlockHooks* previous_;
};

class BlockRunnerScope {
 public:
  explicit BlockRunnerScope(BlockRunner& r);
  ~BlockRunnerScope();
  BlockRunnerScope(const BlockRunnerScope&) = delete;
  BlockRunnerScope& operator=(const BlockRunnerScope&) = delete;
};

}  // namespace remat
