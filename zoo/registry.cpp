#include "autodiff/error.hpp"
#include "autodiff/ops/ops.hpp"
#include "zoo/model.hpp"

namespace remat {

// One line per model: its file defines the function.
void register_gpt2(ModelRegistry&);
void register_llama(ModelRegistry&);
void register_bert(ModelRegistry&);
void register_revformer(ModelRegistry&);

Tensor Model::loss(const ParamStore& p, const Batch& batch) const {
  return ops::cross_entropy(logits(p, batch.tokens), batch.targets);
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
    register_gpt2(r);
    register_llama(r);
    register_bert(r);
    register_revformer(r);
    return r;
  }();
  return registry;
}

}  // namespace remat
