// budget:<size> | budget:<P>% | budget:min: the fastest exact schedule whose
// activation peak fits a memory budget, planned for the model at hand from a
// timed probe step (strategies/planner/: the plan space, the costs and the
// optimal solver). A size is bytes ("150MB", "1.5G"); a percentage is of
// `full`'s measured activation peak; min is the smallest budget any plan
// fits; a ":offload" suffix lets plain blocks move what they save to the
// host offload pool (left out otherwise: on the host backend it costs no
// device memory and no time, so it would win every comparison for nothing
// real). The plan is the whole strategy: it composes with nothing.
#include <cmath>
#include <cstdio>

#include "autodiff/memory_tracker.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "strategies/planner/solver.hpp"
#include "strategies/policy_strategy.hpp"
#include "strategies/registry.hpp"

namespace remat {

Policy per_layer_policy();  // strategies/checkpoint.cpp

namespace {

struct Budget {
  std::int64_t bytes = 0;  // a size
  double fraction = 0;     // or a share of full's measured peak
  bool smallest = false;   // or the smallest feasible (plus `above` of the way from it to full's)
  double above = 0;
  bool offload = false;    // ":offload": plain blocks may move what they save to the host pool
};

double parse_percent(const std::string& spec, const std::string& text) {
  const std::string number = text.substr(0, text.size() - 1);
  std::size_t used = 0;
  double p = -1;
  try {
    p = std::stod(number, &used);
  } catch (const std::exception&) {
  }
  if (text.empty() || text.back() != '%' || used != number.size() || !(p > 0 && p <= 1000))
    throw UserError("strategy '" + spec + "': '" + text + "' is not a percentage in (0, 1000]");
  return p / 100;
}

Budget parse_budget(const std::string& spec, std::string text) {
  Budget b;
  const std::string suffix = ":offload";
  if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    b.offload = true;
    text.resize(text.size() - suffix.size());
  }
  if (text == "min") {
    b.smallest = true;
  } else if (text.rfind("range:", 0) == 0) {
    b.smallest = true;
    b.above = parse_percent(spec, text.substr(6));
    if (b.above > 1) throw UserError("strategy '" + spec + "': range:P% is at most range:100% (full's peak)");
  } else if (!text.empty() && text.back() == '%') {
    b.fraction = parse_percent(spec, text);
  } else if (text.empty()) {
    throw UserError("strategy 'budget' needs a budget: budget:<size> (150MB, 1.5G), budget:<P>% of full's activation "
                    "memory, budget:min, or budget:range:<P>% (that share of the way from min to full's)");
  } else {
    try {
      b.bytes = parse_byte_size(text);
    } catch (const UserError& e) {
      throw UserError("strategy '" + spec + "': " + e.what() + ", a percentage (40%) or min");
    }
  }
  return b;
}

std::string mb(std::int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f MiB", double(bytes) / 1048576.0);
  return s;
}

class BudgetStrategy final : public PolicyStrategy {
 public:
  BudgetStrategy(const std::string& spec, Budget budget) : PolicyStrategy(spec, Policy{}), budget_(budget) {}

  bool needs_costs() const override { return !planned_; }
  std::int64_t activation_budget() const override { return planned_ ? plan_.budget : 0; }
  std::string plan_summary() const override { return summary_; }

  void plan(const SaveProfile& timed) override {
    const planner::ChainCosts costs = planner::chain_costs(timed, budget_.offload);
    const std::int64_t full = timed.measured_peak > 0 ? timed.measured_peak : predict_policy(timed, Policy{}).device;
    std::int64_t bytes = budget_.bytes;
    if (budget_.smallest) {
      bytes = planner::smallest_budget(costs, timed);
      if (budget_.above > 0) bytes += std::int64_t(budget_.above * double(std::max<std::int64_t>(0, full - bytes)));
    }
    if (budget_.fraction > 0) bytes = std::int64_t(std::floor(budget_.fraction * double(full)));
    auto plan = planner::solve(costs, timed, bytes);
    if (!plan) {
      const std::int64_t smallest = planner::smallest_budget(costs, timed);
      throw UserError("strategy '" + spec() + "': no exact schedule fits " + mb(bytes) +
                      " of activations for this model and shape; the smallest feasible budget is " + mb(smallest) +
                      " (budget:min)");
    }
    plan_ = std::move(*plan);
    summary_ = planner::summary(plan_.parts, timed);
    set_policy(planner::plan_policy(plan_.parts, spec()));
    planned_ = true;
  }

  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override {
    if (!planned_) throw std::logic_error("strategy '" + spec() + "' ran before it was planned");
    return PolicyStrategy::run(info, inputs, body);
  }

  // Before planning (a rough estimate of what a run needs): the budget itself.
  MemoryPrediction predict(const SaveProfile& p) const override {
    if (planned_) return PolicyStrategy::predict(p);
    if (budget_.bytes > 0) return {budget_.bytes, 0};
    const std::int64_t full = predict_policy(p, Policy{}).device;
    if (budget_.fraction > 0) return {std::int64_t(budget_.fraction * double(full)), 0};
    const std::int64_t smallest = predict_policy(p, per_layer_policy()).device;
    return {smallest + std::int64_t(budget_.above * double(std::max<std::int64_t>(0, full - smallest))), 0};
  }

 private:
  Budget budget_;
  bool planned_ = false;
  planner::Plan plan_;
  std::string summary_;
};

}  // namespace

void register_budget(StrategyRegistry& r) {
  StrategyEntry e;
  e.name = "budget";
  e.usage = "budget:<size>|<P>%|min|range:<P>%[:offload]";
  e.description =
      "the fastest exact schedule whose activation peak fits the budget (a size, a share of full's, or the "
      "smallest feasible), planned from a timed probe: per block keep, drop tags, or checkpoint segments, "
      "nested, and with :offload moving blocks' saves to the host pool (see `remat plan`); composes with nothing. In a list, budget:auto sweeps min and range:25%, 50%, "
      "75% (of the way from min to full's peak)";
  e.planned = true;
  e.runner = [](const std::string& argument) -> std::unique_ptr<Strategy> {
    const std::string spec = "budget:" + argument;
    return std::make_unique<BudgetStrategy>(spec, parse_budget(spec, argument));
  };
  r.add(std::move(e));
}

}  // namespace remat
