#include "harness/pipelined_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "estimate/pipeline_stages.hpp"
#include "estimate/shape_only_step.hpp"
#include "harness/check.hpp"
#include "pipeline/pipelined_step.hpp"
#include "strategies/registry.hpp"

namespace remat {

bool PipelinedCheckRow::passed() const {
  return (bitwise || !exact) &&
         std::all_of(stages.begin(), stages.end(), [](const PipelinedStage& s) { return s.as_predicted(); });
}

namespace {

// The largest |a - b| relative to the largest |a| of its tensor (0 when equal).
double max_rel_error(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double scale = 0, diff = 0;
    for (std::size_t k = 0; k < want[i].size(); ++k) {
      scale = std::max(scale, double(std::fabs(want[i][k])));
      diff = std::max(diff, double(std::fabs(got[i][k] - want[i][k])));
    }
    if (diff > 0) worst = std::max(worst, scale > 0 ? diff / scale : INFINITY);
  }
  return worst;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Each strategy's stages as the shape-only run predicts them: under --pp
// every rank's passes (estimate/pipeline_stages.hpp); on one rank the same
// accumulating steps the check runs, shape-only.
std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> predicted_stages(
    const ModelSetup& setup, const std::vector<std::string>& specs, const RunSettings& run,
    const pipeline::PipelineSettings& pipe, const ShapeOnlyExtras& extras) {
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> out;  // per strategy, per stage: activation, offload
  if (pipe.split()) {
    for (const PipelineEstimate& e :
         pipeline_stage_estimates(setup, specs, pipe, run.attention, run.precision, "adamw", nullptr, extras)) {
      out.emplace_back();
      for (const StageEstimate& s : e.stages) out.back().emplace_back(s.activation_peak, s.offload_peak);
    }
    return out;
  }
  ShapeOnlyScope shape_only;
  const auto model = models().find(setup.model).make(setup.sizes);
  auto params = std::make_unique<ParamStore>(model->params(), DType::f32);
  const std::vector<Batch> batches(std::size_t(pipe.micro_batches), shape_only_batch(setup.sizes));
  if (extras.prepare) extras.prepare(params, *model, batches.front());
  params->zero_grad();  // made before any step, as the check's are
  for (const std::string& spec : specs) {
    auto strategy = make_strategy(spec);
    const pipeline::PipelinedStep r = pipeline::pipelined_step(*model, *params, batches, step_options(run, strategy.get()), pipe);
    out.push_back({{r.stage_peaks.at(0), r.offload_peaks.at(0)}});
  }
  return out;
}

}  // namespace

std::vector<PipelinedCheckRow> pipelined_check(const ModelSetup& setup, const Model& model, const ParamStore& params,
                                               const std::vector<Batch>& micro_batches,
                                               const std::vector<std::string>& strategies, const RunSettings& run,
                                               const pipeline::PipelineSettings& pipe, const ShapeOnlyExtras& extras) {
  std::vector<std::string> specs = {"full"};
  for (const auto& s : strategies)
    if (s != "full") specs.push_back(s);
  for (const auto& s : specs)
    if (parse_strategy(s).planned) throw UserError("--pp or --micro-batches with a budget ('" + s + "'): not yet");
  // Shape-only first: what each stage will hold, before any step allocates.
  const auto predicted = predicted_stages(setup, specs, run, pipe, extras);
  std::vector<PipelinedCheckRow> rows;
  std::vector<std::vector<float>> reference, got;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto strategy = make_strategy(specs[i]);
    const pipeline::PipelinedStep r =
        pipeline::pipelined_step(model, params, micro_batches, step_options(run, strategy.get()), pipe);
    require_finite_result(r.loss, params);
    PipelinedCheckRow row;
    row.strategy = specs[i];
    row.exact = parse_strategy(specs[i]).exact;
    row.loss = r.loss;
    gradients(params, i == 0 ? reference : got);
    row.bitwise = i == 0 || (r.loss == rows[0].loss && same_bits(got, reference));
    row.max_rel_error = i == 0 ? 0 : max_rel_error(got, reference);
    for (std::size_t s = 0; s < r.stage_peaks.size(); ++s) {
      const auto& [activation, offload] = predicted[i].at(s);
      row.stages.push_back({r.stage_layers[s], r.stage_peaks[s], activation, r.offload_peaks[s], offload});
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace remat
