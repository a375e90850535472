#include "zoo/expert_parallel.hpp"

#include <algorithm>

#include "autodiff/elementwise.hpp"
#include "core/error.hpp"
#include "zoo/model.hpp"

namespace remat::ep {

bool has_experts(const std::string& model) {
  const auto& attributes = models().find(model).attributes;
  return std::find(attributes.begin(), attributes.end(), "E") != attributes.end();
}

void validate(const std::string& model, const Sizes& z) {
  const RankGroup& g = z.ep;
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size)
    throw UserError("--ep " + std::to_string(g.size) + ": rank " + std::to_string(g.rank) + " is not in the group");
  if (!g.split()) return;
  if (!has_experts(model))
    throw UserError("--ep splits a mixture's experts over ranks: " + model + " has none (mixtral has)");
  if (z.cp.split()) throw UserError("--ep with --cp: not yet (one of them beside --tp)");
  if (z.E % g.size != 0)
    throw UserError("--ep " + std::to_string(g.size) + " does not divide the experts E = " + std::to_string(z.E));
  if (z.B % g.size != 0)
    throw UserError("--ep " + std::to_string(g.size) + " does not divide the batch B = " + std::to_string(z.B) +
                    " (each rank runs B / N of its sequences)");
}

void override_experts(const std::string& model, Sizes& z, int experts, int top_k) {
  if (!experts && !top_k) return;
  if (!has_experts(model))
    throw UserError("--experts and --top-k: " + model + " has no experts (mixtral has)");
  if (experts) z.E = experts;
  if (top_k) z.K = top_k;
}

int experts_here(const Sizes& z) { return z.E / z.ep.size; }
int first_expert(const Sizes& z) { return z.ep.rank * experts_here(z); }

int owner(const std::string& name, const Sizes& z) {
  static const std::string marker = ".experts.";
  const auto at = name.find(marker);
  if (!z.ep.split() || at == std::string::npos) return -1;
  return std::stoi(name.substr(at + marker.size())) / experts_here(z);
}

std::vector<std::string> whole_names(const ModelSetup& setup) {
  if (!setup.sizes.ep.split()) return {};
  Sizes whole = setup.sizes;
  whole.ep = RankGroup::expert();
  std::vector<std::string> names;
  for (const auto& spec : models().find(setup.model).make(whole)->params()) names.push_back(spec.name);
  return names;
}

Tensor my_sequences(const Tensor& batch_rows, const RankGroup& g) {
  if (!g.split()) return batch_rows;
  const std::int64_t b = batch_rows.dim(0) / g.size;
  return rows_copy(batch_rows, g.rank * b, b, "sequences");
}

}  // namespace remat::ep
