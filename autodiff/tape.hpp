#pragma once
// The tape: ops append a node per call (in forward order); backward() walks
// it in reverse, so every node runs after all consumers of its outputs. A
// node holds grad slots and its saved-tensor handles, never activations, and
// is destroyed as soon as it has run, which frees what it saved.
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/saved_tensor.hpp"
#include "autodiff/tensor.hpp"

namespace remat {

// Where an op's backward writes the gradient of one input: `fresh` means the
// buffer is new and uninitialised (write, do not add; beta = 0 in a GEMM).
struct GradTarget {
  Tensor t;
  bool fresh = false;
  explicit operator bool() const { return t.defined(); }
};

class BackwardContext;
using BackwardFn = std::function<void(BackwardContext&)>;

struct Node {
  const char* op = "";
  std::string block;  // the block it was recorded in ("" outside blocks)
  std::vector<std::shared_ptr<GradSlot>> inputs;   // null: that input needs no gradient
  std::vector<std::shared_ptr<GradSlot>> outputs;
  BackwardFn backward;
  // Its parameters' gradients read nothing its other inputs' gradients read
  // (a linear's input, saved only for its weight's gradient): a zero-bubble
  // schedule may run it twice, for each kind apart (weight_gradients.hpp).
  bool weight_grads_apart = false;
};

class BackwardContext {
 public:
  explicit BackwardContext(Node& n) : node_(n) {}
  // Gradient flowing into output i (undefined if none did).
  Tensor grad_out(int i = 0) const;
  bool needs_grad(int i) const { return node_.inputs.at(i) != nullptr; }
  // The buffer to write input i's gradient into (undefined if not needed).
  // Inputs that are one tensor get one buffer: fresh only the first time.
  GradTarget grad_in(int i);
  // Adds g into input i's gradient (adopting g when it is the first).
  void accumulate(int i, const Tensor& g);
  // Whether any of its outputs received a gradient (else backward skips it).
  static bool reached(const Node& n);

 private:
  Node& node_;
  std::vector<std::pair<const GradSlot*, Tensor>> handed_out_;  // buffers given by grad_in
};

class Tape {
 public:
  void push(std::unique_ptr<Node> n) { nodes_.push_back(std::move(n)); }
  std::size_t size() const { return nodes_.size(); }
  void clear() { nodes_.clear(); }
  // Runs every node in reverse order and empties the tape.
  void run_backward();

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
};

// The tape ops record on (a thread's default tape unless a scope says other).
Tape& current_tape();
class TapeScope {
 public:
  explicit TapeScope(Tape& t);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

bool grad_enabled();
class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;

 private:
  bool previous_;
};
// Records again inside a NoGradScope: a recomputation that a recipe's run
// (itself unrecorded) triggers must still save what its blocks save.
class EnableGradScope {
 public:
  EnableGradScope();
  ~EnableGradScope();
  EnableGradScope(const EnableGradScope&) = delete;
  EnableGradScope& operator=(const EnableGradScope&) = delete;

 private:
  bool previous_;
};

// Every op records itself through this: construct it with the inputs; if it
// is true, save what backward needs and call finish() with the outputs.
class OpRecorder {
 public:
  OpRecorder(const char* op, std::initializer_list<const Tensor*> inputs)
      : OpRecorder(op, std::vector<const Tensor*>(inputs)) {}
  // For ops with a number of inputs known only at run time (one weight per expert).
  OpRecorder(const char* op, const std::vector<const Tensor*>& inputs);
  explicit operator bool() const { return node_ != nullptr; }
  // Gives each output a grad slot and appends the node to the current tape.
  void finish(std::initializer_list<Tensor*> outputs, BackwardFn fn);
  // Says Node::weight_grads_apart of this op (before finish).
  void weight_grads_apart() {
    if (node_) node_->weight_grads_apart = true;
  }

 private:
  CurrentOpScope op_;  // hooks see which op saves
  std::unique_ptr<Node> node_;
};

// Adds g into a slot's gradient, adopting g when it is the first (copied where
// the slot has a label or a type of its own), as BackwardContext::accumulate.
void accumulate_grad(GradSlot& slot, const Tensor& g, const char* op);

// Seeds d(loss)/d(loss) = 1 and runs the current tape backward.
void backward(const Tensor& loss);
// Seeds the gradient of `out` with `grad_out` and runs the current tape.
void backward(const Tensor& out, const Tensor& grad_out);
// The same from the slot of a tensor no longer kept (a pipeline stage's
// output, whose values went to the next stage).
void backward(GradSlot& slot, const Tensor& grad_out);
// The same from several outputs at once (a pipeline stage's that hands on
// more than one tensor), each slot seeded with its gradient.
void backward(const std::vector<std::pair<GradSlot*, Tensor>>& seeds);

}  // namespace remat
