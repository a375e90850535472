#include <stdexcept>

#include "core/error.hpp"
#include "optim/optimizers.hpp"

namespace remat {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, const std::vector<Tensor>& params,
                                          std::vector<bool> decay) {
  if (!(c.weight_decay >= 0 && c.weight_decay < 1)) throw UserError("--weight-decay must be in [0, 1)");
  if (decay.empty())
    for (const auto& p : params) decay.push_back(decays(p));
  if (decay.size() != params.size()) throw std::logic_error("make_optimizer: one decay flag per parameter");
  if (c.kind == "adamw") {
    if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps > 0))
      throw UserError("AdamW needs 0 <= beta1, beta2 < 1 and eps > 0");
    return make_adamw(c, params, std::move(decay));
  }
  if (c.kind == "sgd") {
    if (!(c.momentum >= 0 && c.momentum < 1)) throw UserError("--momentum must be in [0, 1)");
    return make_sgd(c, params, std::move(decay));
  }
  throw UserError("unknown optimizer '" + c.kind + "' (adamw, sgd)");
}

}  // namespace remat
