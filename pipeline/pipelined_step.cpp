#include "pipeline/pipelined_step.hpp"

#include "autodiff/elementwise.hpp"
#include "autodiff/backend.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "pipeline/stage_runner.hpp"

namespace remat::pipeline {
namespace {

void scale_all(const ParamStore& params, double factor) {
  if (factor == 1) return;
  for (const Tensor& p : params.tensors())
    if (const Tensor g = p.grad(); g.defined()) scale_inplace(g, factor);
}

PipelinedStep accumulated(const Model& model, const ParamStore& params, const std::vector<Batch>& batches,
                          const StepOptions& options) {
  PipelinedStep r;
  double scale = 1, sum = 0;
  std::int64_t peak = 0, offload = 0;
  for (std::size_t m = 0; m < batches.size(); ++m) {
    StepOptions o = options;
    o.zero_grad = m == 0;
    o.keep_scaled = true;
    o.step = options.step * batches.size() + m;
    const StepResult s = run_step(model, params, batches[m], o);
    sum += s.loss;
    scale = s.loss_scale;
    peak = std::max(peak, s.activation_peak);
    offload = std::max(offload, s.offload_peak);
  }
  scale_all(params, 1.0 / (double(batches.size()) * scale));
  r.loss = sum / double(batches.size());
  r.stage_peaks = {peak};
  r.offload_peaks = {offload};
  r.stage_layers = {"0-" + std::to_string(model.sizes().L - 1)};
  return r;
}

}  // namespace

void require_ranks(int stages) {
  if (comm::size() == stages) return;
  throw UserError("--pp " + std::to_string(stages) + ": start " + std::to_string(stages) + " ranks (mpirun -n " +
                  std::to_string(stages) + " remat ...); this job has " + std::to_string(comm::size()) +
                  (comm::built_with_mpi() ? "" : " (this build has no MPI)"));
}

PipelinedStep pipelined_step(const Model& model, const ParamStore& params, const std::vector<Batch>& micro_batches,
                             const StepOptions& options, const PipelineSettings& settings) {
  const int M = int(micro_batches.size());
  if (!settings.split()) return accumulated(model, params, micro_batches, options);
  const int N = settings.stages;
  require_ranks(N);
  const Schedule schedule = parse_schedule(settings.schedule);
  validate(schedule, model.sizes().L, N, M, settings.stage_layers);
  const Layout layout = make_layout(schedule, model.sizes().L, N, settings.stage_layers);
  require_sendable_edges(model, options.precision);
  comm::set_tensor_group(N);  // the job is one pipeline: its model-parallel group
  params.zero_grad();
  StageStep step;
  step.model = &model;
  step.params = &params;
  step.micro_batches = &micro_batches;
  step.options = options;
  step.options.step = options.step * std::uint64_t(M);  // micro-batch m's step is this + m, as accumulated() has it
  const auto link = mpi_link(layout, M);
  const RankResult mine = run_rank(step, schedule, layout, comm::rank(), *link);
  sum_gradients_over_ranks(params, comm::Group::world);
  scale_all(params, 1.0 / (double(M) * mine.loss_scale));
  // Every rank's losses (the last stage's alone are not zero) and peaks, everywhere.
  std::vector<double> own(std::size_t(M) + 2, 0.0), all(own.size() * std::size_t(N));
  for (std::size_t m = 0; m < mine.losses.size(); ++m) own[m] = mine.losses[m];
  own[std::size_t(M)] = double(mine.activation_peak);
  own[std::size_t(M) + 1] = double(mine.offload_peak);
  comm::gather_all(own.data(), std::int64_t(own.size()), all.data());
  PipelinedStep r;
  const std::size_t last = std::size_t(layout.rank_of(layout.count() - 1));
  double sum = 0;
  for (int m = 0; m < M; ++m) sum += all[last * own.size() + std::size_t(m)];
  r.loss = sum / double(M);
  for (int rank = 0; rank < N; ++rank) {
    r.stage_peaks.push_back(std::int64_t(all[std::size_t(rank) * own.size() + std::size_t(M)]));
    r.offload_peaks.push_back(std::int64_t(all[std::size_t(rank) * own.size() + std::size_t(M) + 1]));
    r.stage_layers.push_back(layout.layers_of(rank));
  }
  return r;
}

}  // namespace remat::pipeline
