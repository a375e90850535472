#include "harness/tensor_layout.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/comm.hpp"
#include "core/error.hpp"
#include "finetune/lora.hpp"
#include "optim/optimizer.hpp"
#include "step/step.hpp"
#include "pipeline/pipelined_step.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

namespace {

// comm's split group: `size` consecutive ranks (named by `flag` in errors).
RankGroup tensor_group(int size, bool data_parallel, const char* flag = "--tp") {
  if (size < 1) throw UserError(std::string(flag) + " " + std::to_string(size) + ": a group has at least one rank");
  const bool fits = data_parallel ? comm::size() % size == 0 : comm::size() == size;
  if (size > 1 && !fits)
    throw UserError(std::string(flag) + " " + std::to_string(size) + " runs on " + (data_parallel ? "a multiple of " : "") +
                    std::to_string(size) + " ranks (mpirun -n " + std::to_string(size) + " remat ...); this job has " +
                    std::to_string(comm::size()) + (comm::built_with_mpi() ? "" : " (this build has no MPI)"));
  comm::set_tensor_group(size);
  return {size, comm::rank(comm::Group::tensor)};
}

}  // namespace

SplitGroups apply_shared_split(int tp, bool sequence, int ep, int cp) {
  const int asked = int(tp > 1 || sequence) + int(ep > 1) + int(cp > 1);
  SplitGroups groups;
  if (asked == 0) return groups;
  if (asked > 1) throw UserError("--tp, --ep and --cp together: one split at a time in a matrix (not yet together)");
  const char* flag = ep > 1 ? "--ep" : cp > 1 ? "--cp" : "--tp";
  const RankGroup g = tensor_group(std::max({tp, ep, cp}), /*data_parallel=*/true, flag);
  (ep > 1 ? groups.ep : cp > 1 ? groups.cp : groups.tp) = g;
  groups.tp.sequence = sequence;
  return groups;
}

int take_data_group_rows(ModelSetup& setup, Batch& batch, const std::string& origin) {
  Sizes& z = setup.sizes;
  const int groups = z.split_over_ranks() ? comm::size(comm::Group::data) : 1;
  if (groups == 1) return 1;
  const std::string split = std::string(split_flag(z.ep.size, z.cp.size)) + " " + std::to_string(comm::size(comm::Group::tensor));
  if (ep::has_experts(setup.model) && z.router_aux != 0)  // the mean of the groups' aux losses is not the whole batch's
    throw UserError(split + " on " + std::to_string(comm::size()) + " ranks: " + setup.model +
                    "'s load-balancing loss is taken over the whole batch, so data-parallel groups would change it "
                    "(--router-aux 0, or mpirun -n " + std::to_string(comm::size(comm::Group::tensor)) + ")");
  if (z.B % groups != 0)
    throw UserError(std::to_string(groups) + " data-parallel groups of " + split + " do not divide the batch B = " +
                    std::to_string(z.B) + " (" + origin + ")");
  z.B /= groups;
  batch = batch_rows(batch, std::int64_t(comm::rank(comm::Group::data)) * z.B, z.B);
  if (z.ep.split() && z.B % z.ep.size != 0)  // the expert group splits the group's own sequences
    throw UserError(std::to_string(groups) + " data-parallel groups of " + split + " leave each " + std::to_string(z.B) +
                    " sequences, which --ep " + std::to_string(z.ep.size) + " does not divide (" + origin + ")");
  return groups;
}

double average_over_data_groups(const ParamStore& params, double loss) {
  const double groups = comm::size(comm::Group::data);
  sum_gradients_over_ranks(params, comm::Group::data);
  scale_gradients(params.tensors(), 1.0 / groups);
  return comm::sum_in_rank_order(loss, comm::Group::data) / groups;
}

void quiet_other_ranks() {
  if (comm::rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    throw std::runtime_error("rank " + std::to_string(comm::rank()) + ": cannot silence stdout");
}

bool apply_pipeline_layout(int stages, bool other_split) {
  if (stages == 1) return false;
  if (other_split) throw UserError("--pp with --tp or --ep: not yet");
  if (comm::size() % stages != 0)
    throw UserError("--pp " + std::to_string(stages) + " runs on a multiple of " + std::to_string(stages) +
                    " ranks (mpirun -n " + std::to_string(stages) + " remat ...); this job has " +
                    std::to_string(comm::size()) + (comm::built_with_mpi() ? "" : " (this build has no MPI)"));
  comm::set_tensor_group(stages);
  quiet_other_ranks();
  return true;
}


void apply_pipeline_step_layout(const ModelSetup& setup, const pipeline::PipelineSettings& pipe) {
  if (!pipe.split()) return;
  pipeline::require_stages(setup.model, setup.sizes);
  pipeline::validate(pipeline::parse_schedule(pipe.schedule), setup.sizes.L, pipe.stages, pipe.micro_batches,
                     pipe.stage_layers);
  pipeline::require_ranks(pipe.stages);
  quiet_other_ranks();
}

bool apply_expert_layout(int experts, int tp, bool sequence, ModelSetup& setup, bool data_parallel) {
  if (experts == 1) return false;
  Sizes asked = setup.sizes;
  asked.ep = {experts, 0, false};
  asked.tp = {tp, 0, sequence};
  ep::validate(setup.model, asked);
  setup.sizes.ep = asked.ep;
  setup.sizes.ep = tensor_group(experts, data_parallel, "--ep");
  quiet_other_ranks();
  return true;
}

bool apply_context_layout(int size, bool other_split, ModelSetup& setup, bool data_parallel) {
  if (size == 1) return false;
  if (other_split) throw UserError("--cp with --tp, --sp, --ep, --pp or --micro-batches: not yet");
  setup.sizes.cp = {size, 0, false};
  cp::validate(setup.model, setup.sizes);
  setup.sizes.cp = tensor_group(size, data_parallel, "--cp");
  quiet_other_ranks();
  return true;
}

bool apply_layout(int size, bool sequence, ModelSetup& setup, bool data_parallel) {
  if (size == 1 && !sequence) return false;
  setup.sizes.tp = {size, 0, sequence};
  tp::validate(setup.model, setup.sizes);  // a layout that cannot be is said before how to start it
  setup.sizes.tp = tensor_group(size, data_parallel);
  setup.sizes.tp.sequence = sequence;
  quiet_other_ranks();
  return true;
}

void split_over_ranks(int size, bool sequence, int experts, ModelSetup& setup, std::unique_ptr<ParamStore>& params,
                      bool data_parallel) {
  if (!apply_expert_layout(experts, size, sequence, setup, data_parallel) &&
      !apply_layout(size, sequence, setup, data_parallel))
    return;
  take_rank_parts(setup, params);
}

void take_rank_parts(const ModelSetup& setup, std::unique_ptr<ParamStore>& params) {
  const char* flag = split_flag(setup.sizes.ep.size);
  if ((setup.sizes.ep.split() && !params->adapted().empty()) || params->tensors().size() != params->specs().size())
    throw UserError(std::string(flag) + " with --lora: not yet");
  if (params->any_quantized()) throw UserError(std::string(flag) + " with quantized weights: not yet");
  // Adapters a file brought (a golden saved under --lora) split with their weights.
  params = lora_part_of(*params, models().find(setup.model).make(setup.sizes)->params(), setup.sizes.tp);
}

}  // namespace remat
