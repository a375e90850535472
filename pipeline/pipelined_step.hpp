#pragma once
// A whole step of M micro-batches, as a command runs it: under --pp each
// rank of the job runs its stage's passes (pipeline/stage_runner.hpp), then
// the stages' gradients are summed in rank order on every rank (a stage's
// parameters hold zeros on the others; a tied embedding has a part on the
// first stage and one on the last, summed as Megatron's all-reduce does);
// on one rank the micro-batches accumulate, one step each. Either way the
// gradients end as their mean over the micro-batches (unscaled at fp16),
// as a trainer's --accumulate leaves them.
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/batch.hpp"
#include "pipeline/schedule.hpp"
#include "step/step.hpp"
#include "zoo/model.hpp"

namespace remat::pipeline {

struct PipelinedStep {
  double loss = 0;                         // the mean over the micro-batches
  std::vector<std::int64_t> stage_peaks;   // per rank, its measured activation peak (one rank: the largest step's)
  std::vector<std::int64_t> offload_peaks; // the same for the offload pool
  std::vector<std::string> stage_layers;   // per rank: its layers ("0-3", interleaved "0-1, 4-5")
};

// UserError unless the job has exactly `stages` ranks (grads --pp: the job is one pipeline).
void require_ranks(int stages);

PipelinedStep pipelined_step(const Model& model, const ParamStore& params, const std::vector<Batch>& micro_batches,
                             const StepOptions& options, const PipelineSettings& settings);

}  // namespace remat::pipeline
