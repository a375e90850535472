#pragma once
// `remat check --pp N --micro-batches M` (or --micro-batches alone, on one
// rank): every strategy's step of M micro-batches through the pipeline
// beside full's under the same schedule. The stages' gradients are summed in
// the same order whatever the strategy, so an exact strategy's are bitwise
// full's; each stage's measured activation and offload peaks are what the
// shape-only estimate (estimate/pipeline_stages.hpp) says for that stage.
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/batch.hpp"
#include "estimate/shape_only_step.hpp"
#include "pipeline/schedule.hpp"
#include "step/step.hpp"
#include "zoo/model.hpp"

namespace remat {

struct PipelinedStage {
  std::string layers;  // "0-3", interleaved "0-1, 4-5"
  std::int64_t activation_peak = 0, predicted_activation_peak = 0;
  std::int64_t offload_peak = 0, predicted_offload_peak = 0;
  bool as_predicted() const {
    return activation_peak == predicted_activation_peak && offload_peak == predicted_offload_peak;
  }
};

struct PipelinedCheckRow {
  std::string strategy;
  bool exact = true;          // performs full's arithmetic: must be bitwise
  double loss = 0;
  bool bitwise = false;       // loss and every gradient equal full's
  double max_rel_error = 0;   // the largest gradient difference, relative to its tensor's largest value
  std::vector<PipelinedStage> stages;  // per rank (one rank: its largest micro-batch step)
  bool passed() const;
};

// Runs full first, then each of `strategies` (budgets refused: UserError).
std::vector<PipelinedCheckRow> pipelined_check(const ModelSetup& setup, const Model& model, const ParamStore& params,
                                               const std::vector<Batch>& micro_batches,
                                               const std::vector<std::string>& strategies, const RunSettings& run,
                                               const pipeline::PipelineSettings& pipe,
                                               const ShapeOnlyExtras& extras = {});

}  // namespace remat
