// selective[:tags]: inside every block, a saved tensor produced by one of
// the listed tags (or tag groups, strategies/policy.hpp) is dropped and
// recomputed in backward from what its producer saved anyway (the op's
// recipe), so only those ops run again, once each; everything else is
// kept. Bare `selective` drops everything but GEMM outputs: the attention
// core, the MLP activation and the norms (a third of gpt2's activations for
// a few percent of a step's time). Megatron-LM's selective recomputation is
// selective:attn-core, which the fused attention kernel already is. The
// last block is kept: its backward comes at once.
#include <set>

#include "core/error.hpp"
#include "core/text.hpp"
#include "strategies/registry.hpp"

namespace remat {
namespace {

Policy recompute_tags(const std::string& list) {
  std::set<std::string> tags;
  Policy p;
  for (const auto& name : split(list.empty() ? "attn-core,mlp-act,norm" : list)) {
    if (name.empty()) throw UserError("strategy 'selective:" + list + "': an empty tag");
    for (const auto& t : expand_tag(name)) tags.insert(t);
    if (!list.empty()) p.named_tags.push_back(name);
  }
  p.decide = [tags](const SavedTensorInfo& t) {
    const bool last = t.block.index == t.block.count - 1;
    return !last && !t.segment_input && t.recomputable && tags.count(t.tag) ? Decision::recompute : Decision::none;
  };
  return p;
}

}  // namespace

void register_selective(StrategyRegistry& r) {
  StrategyEntry e;
  e.name = "selective";
  e.usage = "selective[:tags]";
  e.description =
      "drop the saved tensors these tags or groups produce; recompute just those ops in backward. Bare: "
      "attn-core,mlp-act,norm (keep GEMM outputs); selective:attn-core is Megatron-LM's";
  e.policy = recompute_tags;
  e.in_all = {"selective", "selective:attn-core"};
  r.add(std::move(e));
}

}  // namespace remat
