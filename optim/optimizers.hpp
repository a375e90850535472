#pragma once
// The optimizers' constructors, one file each, and what they share.
#include "optim/optimizer.hpp"

namespace remat {

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& c, const std::vector<Tensor>& params);
std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& c, const std::vector<Tensor>& params);

// Weight decay applies to matrices (weights, embeddings), never to biases
// and norm gains, the model's 1-D parameters.
inline bool decays(const Tensor& p) { return p.rank() >= 2; }

}  // namespace remat
