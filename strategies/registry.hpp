#pragma once
// Strategy specs: parsing, the catalogue `remat strategies` prints, and the
// `all` set. A spec is a base strategy with an optional "+offload":
//   full | every:K | per-layer | sqrt | selective[:kind,kind...] | offload
//   | offload-checkpoint | reversible, and every:K, per-layer, sqrt,
//   selective + offload.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "strategies/strategy.hpp"

namespace remat {

struct StrategyInfo {
  std::string spec;         // as written, e.g. "every:K"
  std::string description;  // one line
  std::string applies_to;   // which models
};

const std::vector<StrategyInfo>& strategy_catalog();
// The op kinds selective can drop, e.g. "attn-core".
std::vector<std::string> selectable_kinds();
// What bare `selective` drops: every saved tensor that is not a GEMM's output
// (the attention core, the MLP activation, the norms). They cost a few
// percent of a step's time to recompute and hold a third of gpt2's activations;
// the attention core alone (Megatron-LM's choice) is what the fused kernel
// already leaves unsaved.
std::set<OpKind> default_selective_kinds();

// Throws UserError saying what is wrong and what is accepted.
std::unique_ptr<Strategy> make_strategy(const std::string& spec);
// "all", or a comma-separated list (a selective spec's kinds may follow it
// with commas: "full,selective:attn-core,mlp-act,sqrt"). Each is validated.
// `all` includes `reversible` for a reversible model.
std::vector<std::string> parse_strategy_list(const std::string& list, bool reversible_model = false);
std::vector<std::string> all_strategies(bool reversible_model = false);

}  // namespace remat
