#include "estimate/step_need.hpp"

#include <algorithm>

#include "core/memory.hpp"
#include "estimate/shape_only_step.hpp"
#include "strategies/registry.hpp"
#include "zoo/params.hpp"

namespace remat {

StepNeed step_need(const ModelSetup& setup, ops::AttentionKernel kernel, const std::vector<std::string>& strategies,
                   Precision precision) {
  StepNeed need;
  if (strategies.empty()) {
    const auto model = models().find(setup.model).make(setup.sizes);
    need.parameters = std::int64_t(sizeof(float)) * count_params(model->params());
    return need;
  }
  std::vector<std::string> specs;
  for (const auto& spec : strategies) {
    const std::string counted = parse_strategy(spec).planned ? "full" : spec;
    if (std::find(specs.begin(), specs.end(), counted) == specs.end()) specs.push_back(counted);
  }
  const ShapeOnlyRun run = shape_only_run(setup, specs, kernel, "adamw", nullptr, precision);
  need.parameters = run.state.parameter_bytes;
  for (const auto& step : run.steps) need.activations = std::max(need.activations, step.activation_peak + step.offload_peak);
  return need;
}

std::int64_t require_step_fits(const ModelSetup& setup, ops::AttentionKernel kernel,
                               const std::vector<std::string>& strategies, int parameter_copies,
                               const std::string& what, std::int64_t limit, bool force, Precision precision) {
  const StepNeed weights = step_need(setup, kernel, {}, precision);
  require_memory(weights.total(parameter_copies), what, limit, force);
  if (strategies.empty()) return weights.total(parameter_copies);
  const std::int64_t total = step_need(setup, kernel, strategies, precision).total(parameter_copies);
  require_memory(total, what, limit, force);
  return total;
}

}  // namespace remat
