#include "core/error.hpp"
#include "autodiff/ops/ops.hpp"
#include "zoo/model.hpp"
#include "zoo/model_list.hpp"

namespace remat {

#define REMAT_DECLARE_MODEL(name) void register_##name(ModelRegistry&);
REMAT_MODELS(REMAT_DECLARE_MODEL)
#undef REMAT_DECLARE_MODEL

LossTerms Model::loss_terms(const ParamStore& p, const Batch& batch) const {
  return {ops::cross_entropy(logits(p, batch), batch.targets), {}, {}};
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

}  // namespace remat
