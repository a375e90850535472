#include "core/error.hpp"
#include "autodiff/ops/ops.hpp"
#include "zoo/model.hpp"
#include "zoo/model_list.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

#define REMAT_DECLARE_MODEL(name) void register_##name(ModelRegistry&);
REMAT_MODELS(REMAT_DECLARE_MODEL)
#undef REMAT_DECLARE_MODEL

LossTerms Model::loss_terms(const ParamStore& p, const Batch& batch) const {
  return {tp::cross_entropy(logits(p, batch), batch.targets, sizes_.tp), {}, {}};
}

const ModelRegistry& models() {
  static const ModelRegistry registry = [] {
    ModelRegistry r;
#define REMAT_REGISTER_MODEL(name) register_##name(r);
    REMAT_MODELS(REMAT_REGISTER_MODEL)
#undef REMAT_REGISTER_MODEL
    return r;
  }();
  return registry;
}

std::vector<std::string> tensor_parallel_models() {
  std::vector<std::string> names;
  for (const std::string& name : models().names())
    if (models().find(name).tensor_parallel) names.push_back(name);
  return names;
}

}  // namespace remat
