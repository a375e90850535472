#include "harness/step.hpp"

#include "autodiff/memory_tracker.hpp"
#include "autodiff/tape.hpp"

namespace remat {

double forward_backward(const Model& model, const ParamStore& params, const Batch& batch) {
  params.zero_grad();
  Tensor loss;
  {
    MemoryPhase phase("forward");
    loss = model.loss(params, batch);
  }
  const double value = loss.item();
  MemoryPhase phase("backward");
  backward(loss);
  return value;
}

}  // namespace remat
