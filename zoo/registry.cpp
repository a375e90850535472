#include "autodiff/error.hpp"
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

void ModelRegistry::add(ModelInfo info) { models_.push_back(std::move(info)); }

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> n;
  for (const auto& m : models_) n.push_back(m.name);
  return n;
}

const ModelInfo& ModelRegistry::find(const std::string& name) const {
  for (const auto& m : models_)
    if (m.name == name) return m;
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("unknown model '" + name + "' (models: " + known + ")");
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
