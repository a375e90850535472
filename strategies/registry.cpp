#include "strategies/registry.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "strategies/policy_strategy.hpp"
#include "strategies/strategy_list.hpp"

namespace remat {

#define REMAT_DECLARE_STRATEGY(name) void register_##name(StrategyRegistry&);
REMAT_STRATEGIES(REMAT_DECLARE_STRATEGY)
#undef REMAT_DECLARE_STRATEGY


namespace {

struct Part {
  const StrategyEntry* entry;
  std::string text, argument;
};

// "every:2+offload" -> its parts, each an entry and its argument.
std::vector<Part> parse(const std::string& spec, const StrategyRegistry& registry) {
  std::vector<Part> parts;
  for (const auto& text : split(spec, '+')) {
    if (text.empty()) throw UserError("strategy '" + spec + "': an empty part (see `remat strategies`)");
    const auto colon = text.find(':');
    const std::string head = text.substr(0, colon);
    const StrategyEntry& e = registry.find(head);
    parts.push_back({&e, text, colon == std::string::npos ? "" : text.substr(colon + 1)});
    if (colon != std::string::npos && parts.back().argument.empty())
      throw UserError("strategy '" + spec + "': '" + head + ":' needs an argument (" + e.usage + ")");
    if (colon != std::string::npos && e.usage.find(':') == std::string::npos)
      throw UserError("strategy '" + spec + "': '" + head + "' takes no argument");
  }
  if (parts.size() > 1)
    for (const auto& p : parts)
      if (p.entry->runner)
        throw UserError("strategy '" + spec + "': '" + p.entry->name +
                        "' has a mechanism of its own and composes with no other strategy");
  return parts;
}

Policy policy_of(const std::vector<Part>& parts, const std::string& spec) {
  std::vector<Policy> policies;
  for (const auto& p : parts) {
    Policy policy = p.entry->policy(p.argument);
    policy.name = p.text;
    policies.push_back(std::move(policy));
  }
  return compose(policies, spec);
}

}  // namespace

void StrategyRegistry::add(StrategyEntry entry) {
  Registry::add(std::move(entry), [](const StrategyEntry& e) {
    if (!e.policy == !e.runner) throw std::logic_error("strategy '" + e.name + "' must be either a policy or a runner");
  });
}

const StrategyRegistry& strategies() {
  static const StrategyRegistry registry = [] {
    StrategyRegistry r;
#define REMAT_REGISTER_STRATEGY(name) register_##name(r);
    REMAT_STRATEGIES(REMAT_REGISTER_STRATEGY)
#undef REMAT_REGISTER_STRATEGY
    return r;
  }();
  return registry;
}

StrategySpec parse_strategy(const std::string& text) {
  const auto parts = parse(text, strategies());
  StrategySpec spec;
  spec.text = text;
  for (const auto& p : parts) {
    spec.parts.push_back(p.text);
    spec.exact = spec.exact && p.entry->exact;
    spec.planned = spec.planned || p.entry->planned;
    spec.own_mechanism = spec.own_mechanism || bool(p.entry->runner);
  }
  if (!spec.own_mechanism) spec.tags = policy_of(parts, text).named_tags;
  return spec;
}

std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec) { return make_strategy(spec.text, strategies()); }
std::unique_ptr<Strategy> make_strategy(const std::string& spec) { return make_strategy(spec, strategies()); }

std::unique_ptr<Strategy> make_strategy(const std::string& spec, const StrategyRegistry& registry) {
  const auto parts = parse(spec, registry);
  std::unique_ptr<Strategy> s = parts.front().entry->runner ? parts.front().entry->runner(parts.front().argument)
                                                            : std::make_unique<PolicyStrategy>(spec, policy_of(parts, spec));
  s->exact_ = std::all_of(parts.begin(), parts.end(), [](const Part& p) { return p.entry->exact; });
  return s;
}

bool strategy_applies(const std::string& spec, const ModelTraits& model, std::string* why) {
  for (const auto& p : parse(spec, strategies()))
    if (!p.entry->applies(model)) {
      if (why) *why = "strategy '" + spec + "' applies only to " + p.entry->applies_to;
      return false;
    }
  return true;
}

std::vector<std::string> all_strategies(const ModelTraits& model) {
  std::vector<std::string> all;
  for (const auto& e : strategies().all())
    if (e.applies(model)) all.insert(all.end(), e.in_all.begin(), e.in_all.end());
  return all;
}

std::vector<std::string> parse_strategy_list(const std::string& list, const ModelTraits& model) {
  if (list == "all") return all_strategies(model);
  std::vector<std::string> specs;
  for (const std::string& item : split_list(list, "--strategies")) {
    // An item that names no strategy continues the tags of a selective spec
    // before it: "selective:softmax,norm+offload".
    const std::string head = item.substr(0, std::min(item.find(':'), item.find('+')));
    const bool known = std::any_of(strategies().all().begin(), strategies().all().end(),
                                   [&](const StrategyEntry& e) { return e.name == head; });
    if (!specs.empty() && !known && head != "all" && !head.empty() && specs.back().rfind("selective:", 0) == 0) {
      std::string& prev = specs.back();
      const auto plus = prev.find('+');
      prev = prev.substr(0, plus) + "," + item + (plus == std::string::npos ? "" : prev.substr(plus));
      continue;
    }
    if (item == "all") {
      for (auto& s : all_strategies(model)) specs.push_back(s);
      continue;
    }
    if (item == "budget:auto") {  // the planner's front, from the smallest feasible budget towards full's
      for (const char* s : {"budget:min", "budget:range:25%", "budget:range:50%", "budget:range:75%"}) specs.push_back(s);
      continue;
    }
    if (item.empty()) throw UserError("empty strategy in list '" + list + "'");
    specs.push_back(item);
  }
  for (const auto& s : specs) parse_strategy(s);  // validate now, not halfway through a run
  return specs;
}

}  // namespace remat
