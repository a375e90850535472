#include "strategies/registry.hpp"

#include <algorithm>

#include "autodiff/error.hpp"
#include "strategies/builtin.hpp"

namespace remat {
namespace {

const OpKind kSelectable[] = {OpKind::attn_core, OpKind::mlp_act, OpKind::norm, OpKind::matmul, OpKind::embedding};

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw UserError("strategy '" + spec + "': " + why + " (see `remat strategies`)");
}

int parse_k(const std::string& spec, const std::string& text) {
  try {
    std::size_t used = 0;
    const int k = std::stoi(text, &used);
    if (used == text.size() && k >= 1) return k;
  } catch (const std::exception&) {
  }
  bad(spec, "K must be a whole number of blocks, at least 1, got '" + text + "'");
}

std::set<OpKind> parse_kinds(const std::string& spec, const std::string& text) {
  std::set<OpKind> kinds;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, end - start);
    const OpKind* k = std::find_if(std::begin(kSelectable), std::end(kSelectable),
                                   [&](OpKind o) { return name == op_kind_name(o); });
    if (k == std::end(kSelectable))
      bad(spec, "unknown op kind '" + name + "'; kinds: " + join(selectable_kinds(), ", "));
    kinds.insert(*k);
    start = end + 1;
  }
  return kinds;
}

}  // namespace

std::set<OpKind> default_selective_kinds() { return {OpKind::attn_core, OpKind::mlp_act, OpKind::norm}; }

std::vector<std::string> selectable_kinds() {
  std::vector<std::string> v;
  for (OpKind k : kSelectable) v.push_back(op_kind_name(k));
  return v;
}

const std::vector<StrategyInfo>& strategy_catalog() {
  static const std::vector<StrategyInfo> catalog = {
      {"full", "keep every saved tensor on the device (the reference)", "every model"},
      {"every:K", "checkpoint segments of K blocks: keep each segment's input, recompute the rest in backward",
       "every model"},
      {"per-layer", "every:1: keep only each block's input", "every model"},
      {"sqrt", "every:K with K = floor(sqrt(L)): memory ~ sqrt(L)", "every model"},
      {"selective[:kinds]",
       "drop saved tensors of these op kinds and recompute just those ops; kinds: " + join(selectable_kinds(), ", ") +
           ". Default attn-core,mlp-act,norm: keep GEMM outputs, recompute the cheap ops (selective:attn-core is "
           "Megatron-LM's, which the fused attention kernel already is)",
       "every model"},
      {"offload", "move every tensor a block saves to the host offload pool; prefetch it back for backward",
       "every model"},
      {"offload-checkpoint", "per-layer checkpointing with the block inputs in the offload pool", "every model"},
      {"reversible", "keep nothing inside blocks: rebuild each block's inputs from its outputs in backward",
       "reversible models"},
      {"<S>+offload", "every:K, per-layer, sqrt or selective with what they keep in the offload pool", "every model"},
  };
  return catalog;
}

std::vector<std::string> all_strategies(bool reversible_model) {
  std::vector<std::string> all = {"full", "per-layer", "every:2", "sqrt", "selective", "selective:attn-core",
                                  "offload", "offload-checkpoint"};
  if (reversible_model) all.push_back("reversible");
  return all;
}

std::unique_ptr<Strategy> make_strategy(const std::string& spec) {
  std::string base = spec;
  bool offload = false;
  if (const auto plus = spec.find('+'); plus != std::string::npos) {
    base = spec.substr(0, plus);
    const std::string extra = spec.substr(plus + 1);
    if (extra != "offload") bad(spec, "only '+offload' composes with a strategy, got '+" + extra + "'");
    if (base == "full" || base == "offload" || base == "offload-checkpoint" || base == "reversible")
      bad(spec, "'" + base + "' does not compose with +offload (use 'offload' or 'offload-checkpoint')");
    offload = true;
  }
  if (base == "full") return make_full();
  if (base == "reversible") return make_reversible();
  if (base == "offload") return make_offload();
  if (base == "offload-checkpoint") return make_checkpoint(spec, 1, true);
  if (base == "per-layer") return make_checkpoint(spec, 1, offload);
  if (base == "sqrt") return make_checkpoint(spec, 0, offload);
  if (base.rfind("every:", 0) == 0) return make_checkpoint(spec, parse_k(spec, base.substr(6)), offload);
  if (base == "selective") return make_selective(spec, default_selective_kinds(), offload);
  if (base.rfind("selective:", 0) == 0) return make_selective(spec, parse_kinds(spec, base.substr(10)), offload);
  std::vector<std::string> known;
  for (const auto& s : strategy_catalog()) known.push_back(s.spec);
  bad(spec, "unknown strategy; strategies: " + join(known, ", "));
}

std::vector<std::string> parse_strategy_list(const std::string& list, bool reversible_model) {
  if (list == "all") return all_strategies(reversible_model);
  std::vector<std::string> specs;
  const auto kinds = selectable_kinds();
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, end - start);
    start = end + 1;
    // A bare op kind continues the selective spec before it.
    const std::string kind = item.substr(0, item.find('+'));
    if (!specs.empty() && specs.back().rfind("selective:", 0) == 0 &&
        std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
      std::string& prev = specs.back();
      const auto plus = prev.find('+');
      prev = prev.substr(0, plus) + "," + item + (plus == std::string::npos ? "" : prev.substr(plus));
      continue;
    }
    if (item == "all") {
      for (auto& s : all_strategies(reversible_model)) specs.push_back(s);
      continue;
    }
    if (item.empty()) throw UserError("empty strategy in list '" + list + "'");
    specs.push_back(item);
  }
  for (const auto& s : specs) make_strategy(s);  // validate now, not halfway through a run
  return specs;
}

}  // namespace remat
