#pragma once
// Weight gradients set apart: the zero-bubble pipeline schedules (Qi et al.
// 2023, "Zero Bubble Pipeline Parallelism", ZB-H1) split a stage's backward
// pass in two. B computes the gradients that flow to activations (what the
// previous stage waits for); W computes the parameters' gradients later, in
// what would otherwise be the pipeline's bubble.
//
// While a DeferWeightGradientsScope is open, backward hands every node with
// a parameter among its inputs to the scope's DeferredWeightGradients:
// - a node whose parameters' gradients read nothing else does
//   (Node::weight_grads_apart: linear, grouped_linear, embedding, the
//   quantized linear's bias) runs in B with its parameters hidden, and again
//   in W with everything else hidden. Until W it keeps what it saved and its
//   output's gradient: the inputs of W that a zero-bubble stage holds.
// - any other node (a norm's gain and bias) runs whole in B, its parameters'
//   gradients written into buffers of their own, which W adds into the
//   parameters' (one addition each, as the norms' own is: they sum their rows
//   first. An add of a broadcast parameter, a row-parallel bias under --tp,
//   adds its rows onto the gradient one by one instead; pipelines do not run
//   beside --tp yet, and such an op would have to be set apart too.)
// A node kept for W holds what it saved, and those saves hold values only
// (saved_tensor.cpp's Kept: no recipe, whose closure would hold its
// producer's saves too).
// W runs the nodes in the order B met them, so every parameter's gradient
// takes its terms in the order one backward gives them: the same bits.
// Nothing of W writes before W runs: a parameter's gradient is untouched by B.
#include <memory>
#include <utility>
#include <vector>

#include "autodiff/tape.hpp"

namespace remat {

class DeferredWeightGradients {
 public:
  DeferredWeightGradients() = default;
  DeferredWeightGradients(const DeferredWeightGradients&) = delete;
  DeferredWeightGradients& operator=(const DeferredWeightGradients&) = delete;

  bool empty() const { return items_.empty(); }
  // W: every parameter gradient set apart, in order; empties the list (and
  // frees what each node kept as it goes).
  void run();

  // For the tape's backward: whether `n` has a parameter among its inputs,
  // and B's part of it (its node kept where W runs it again).
  bool takes(const Node& n) const;
  void take(std::unique_ptr<Node> n);

 private:
  struct Item {
    std::unique_ptr<Node> node;  // runs again in W (weight_grads_apart)
    std::vector<std::pair<std::shared_ptr<GradSlot>, std::shared_ptr<GradSlot>>> buffered;  // (parameter, its buffer)
  };
  std::vector<Item> items_;
};

// Backward on this thread sets weight gradients apart into `d` while it lives.
class DeferWeightGradientsScope {
 public:
  explicit DeferWeightGradientsScope(DeferredWeightGradients& d);
  ~DeferWeightGradientsScope();
  DeferWeightGradientsScope(const DeferWeightGradientsScope&) = delete;
  DeferWeightGradientsScope& operator=(const DeferWeightGradientsScope&) = delete;

 private:
  DeferredWeightGradients* previous_;
};
DeferredWeightGradients* deferred_weight_gradients();  // null outside any scope

}  // namespace remat
