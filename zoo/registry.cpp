#include "zoo/model.hpp"

#include <stdexcept>

#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "core/error.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/model_list.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

#define REMAT_DECLARE_MODEL(name) void register_##name(ModelRegistry&);
REMAT_MODELS(REMAT_DECLARE_MODEL)
#undef REMAT_DECLARE_MODEL

LossTerms Model::loss_terms(const ParamStore& p, const Batch& batch) const {
  if (staged()) return head_loss(p, layers(p, embed(p, batch), 0, sizes_.L, batch), batch);
  return {cp::cross_entropy(logits(p, batch), batch.targets, sizes_), {}, {}};
}

namespace {
[[noreturn]] void not_staged(const char* what) {
  throw std::logic_error(std::string("Model::") + what + ": the model has no stages (staged() is false)");
}
}  // namespace

Tensor Model::logits(const ParamStore& p, const Batch& batch) const {
  if (!staged()) not_staged("logits");
  return head_logits(p, layers(p, embed(p, batch), 0, sizes_.L, batch).at(0));
}
Tensors Model::embed(const ParamStore&, const Batch&) const { not_staged("embed"); }
Tensors Model::layer(const ParamStore&, int, const Tensors&) const { not_staged("layer"); }
std::string Model::layer_name(int) const { not_staged("layer_name"); }
Tensor Model::head_logits(const ParamStore&, const Tensor&) const { not_staged("head_logits"); }

Tensors Model::layers(const ParamStore& p, Tensors x, int first, int last, const Batch&) const {
  Tensors y = std::move(x);
  for (int i = first; i < last; ++i)
    y = run_block({i, sizes_.L, layer_name(i)}, y, [this, &p, i](const Tensors& in) { return layer(p, i, in); });
  return y;
}

LossTerms Model::head_loss(const ParamStore& p, const Tensors& x, const Batch& batch) const {
  return {cp::cross_entropy(head_logits(p, x.at(0)), batch.targets, sizes_), {}, {}};
}

std::vector<Model::StageEdge> Model::stage_edges(int) const { return {{{sizes_.B, sizes_.S, sizes_.D}, true, true}}; }

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
