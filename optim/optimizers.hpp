#pragma once
// The optimizers' constructors, one file each, and what they share.
#include "optim/optimizer.hpp"

namespace remat {

// decays[k]: weight decay on params[k] (one flag per parameter).
std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& c, const std::vector<Tensor>& params,
                                      std::vector<bool> decays);
std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& c, const std::vector<Tensor>& params,
                                    std::vector<bool> decays);

}  // namespace remat
