#pragma once
// The strategies: one registry entry each, registered from one list
// (strategies/strategy_list.hpp), as the zoo's models are. An entry holds
// everything known about a strategy: its name and description, the models
// it applies to (a predicate), whether it is exact, and what it is: a
// policy (most are; the engine runs it and predicts its memory) or a
// strategy with a block runner of its own.
//
// A spec names one entry, or several joined by '+' whose policies compose
// (strategies/policy.hpp): "full", "every:2", "selective:softmax,norm",
// "selective:attn-core+offload".
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "core/text.hpp"
#include "strategies/policy.hpp"
#include "strategies/strategy.hpp"

namespace remat {

inline bool every_model(const ModelTraits&) { return true; }

struct StrategyEntry {
  std::string name;         // the spec's head: "every", "selective", "full"
  std::string usage;        // as written in a spec: "every:K", "selective[:tags]"
  std::string description;  // one line, for `remat strategies`
  bool exact = true;        // bitwise equal to full (the same arithmetic)
  bool planned = false;     // plans its schedule from costs (a timed probe or a device model) before a step
  std::function<bool(const ModelTraits&)> applies = every_model;
  std::string applies_to = "every model";  // the predicate in words, for `remat strategies`
  // A policy strategy: the policy for the spec's argument (the text after
  // ':', empty if none); UserError for a bad one.
  std::function<Policy(const std::string& argument)> policy;
  // Or a strategy with its own block runner; it composes with nothing.
  std::function<std::unique_ptr<Strategy>(const std::string& argument)> runner;
  // Specs `remat matrix --strategies all` includes for this entry.
  std::vector<std::string> in_all;
};

// find() throws UserError listing the strategies (as written in a spec) if
// a name is none; add() refuses an entry that is neither a policy nor a runner.
class StrategyRegistry : public Registry<StrategyEntry> {
 public:
  StrategyRegistry() : Registry("strategy", "strategies", [](const StrategyEntry& e) { return e.usage; }) {}
  void add(StrategyEntry entry);
};

// Every built-in strategy (the list in strategies/strategy_list.hpp).
const StrategyRegistry& strategies();

// A spec parsed once: what callers ask of a strategy (exact? planned from
// costs? which tags?) answered without building it. parse_strategy throws
// UserError saying what is wrong and what is accepted.
struct StrategySpec {
  std::string text;                // as written: "every:2+offload"
  std::vector<std::string> parts;  // its parts as written: "every:2", "offload"
  bool exact = true;               // bitwise equal to full: every part is
  bool planned = false;            // plans from costs first (budget:...)
  bool own_mechanism = false;      // a block runner of its own (reversible, budget): composes with nothing
  std::vector<std::string> tags;   // the tags and tag groups its policies name
};
StrategySpec parse_strategy(const std::string& spec);

// The strategy a step runs, made where a step runs. Throws UserError as
// parse_strategy does.
std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec);
std::unique_ptr<Strategy> make_strategy(const std::string& spec);
std::unique_ptr<Strategy> make_strategy(const std::string& spec, const StrategyRegistry& registry);

// Whether `spec` applies to a model with these traits; if not, why.
bool strategy_applies(const std::string& spec, const ModelTraits& model, std::string* why = nullptr);

// "all", or a comma-separated list (a selective spec's tags may follow it
// with commas: "full,selective:softmax,norm,sqrt"). Each is validated.
// `all` is every entry's `in_all` that applies to the model.
std::vector<std::string> parse_strategy_list(const std::string& list, const ModelTraits& model = {});
std::vector<std::string> all_strategies(const ModelTraits& model = {});



}  // namespace remat
