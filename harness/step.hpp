#pragma once
// One training step's forward and backward: the unit every command measures.
#include "datasets/batch.hpp"
#include "zoo/model.hpp"

namespace remat {

// Clears the parameters' gradients, runs forward and backward, returns the loss.
double forward_backward(const Model& model, const ParamStore& params, const Batch& batch);

}  // namespace remat
