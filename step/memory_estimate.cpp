#include "step/memory_estimate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

std::vector<ParamSpec> specs_with(const std::string& model, Sizes z, int L) {
  z.L = L;
  return models().find(model).make(z)->params();
}

}  // namespace

MemoryNeed estimate_need(const std::string& model, const Sizes& z, bool plain_attention,
                         const std::vector<std::string>& strategies) {
  // Two and four blocks (an encoder-decoder needs an even count): what two
  // more add is two blocks' worth.
  const auto two = specs_with(model, z, 2), four = specs_with(model, z, 4);
  const std::int64_t p2 = count_params(two), per_block = (count_params(four) - p2) / 2;
  MemoryNeed need;
  need.parameters = 4 * (p2 + std::int64_t(z.L - 2) * per_block);
  if (strategies.empty()) return need;

  // One block's saved bytes: the inputs and outputs of its linear layers
  // (the 2-D weights that two more blocks add, halved), a quarter more for
  // norms, activations and residuals; the probabilities with the plain kernel.
  std::set<std::string> first;
  for (const auto& s : two) first.insert(s.name);
  std::int64_t per_token = 0;
  for (const auto& s : four)
    if (!first.count(s.name) && s.shape.size() == 2) per_token += s.shape[0] + s.shape[1];
  per_token /= 2;
  const std::int64_t tokens = std::int64_t(z.B) * z.S;
  BlockSaves block;
  block.saved = 4 * tokens * per_token * 5 / 4;
  if (plain_attention) block.saved += 4 * std::int64_t(z.B) * z.H * z.S * z.S;
  block.input = 2 * 4 * tokens * z.D;  // two streams for a reversible model
  block.forward_peak = block.saved + 2 * block.input;
  block.backward_peak = 2 * block.saved;
  SaveProfile profile;
  profile.blocks.assign(std::size_t(z.L), block);
  profile.outside_peak = 4 * tokens * (3 * std::int64_t(z.V) + 4 * z.D);
  for (const auto& spec : strategies) {
    const MemoryPrediction p = make_strategy(spec)->predict(profile);
    need.activations = std::max(need.activations, p.device + p.offload);
  }
  return need;
}

}  // namespace remat
