#include "harness/tensor_layout.hpp"

#include <algorithm>
#include <cstdio>

#include "autodiff/random.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "finetune/lora.hpp"
#include "optim/optimizer.hpp"
#include "step/step.hpp"
#include "pipeline/pipelined_step.hpp"
#include "pipeline/stage_runner.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

namespace {

// comm's layout for `layout` (validated): its groups' ranks, consecutive,
// all of the job or (`data_parallel`) each of its consecutive groups of
// as many, training data-parallel. The groups' sizes and this rank's places.
SplitGroups set_rank_groups(const RankLayout& layout, bool data_parallel) {
  const std::string flags = layout.flags();
  for (int n : {layout.tp, layout.ep, layout.cp})
    if (n < 1) throw UserError(flags + ": a group has at least one rank");
  if (layout.ep > 1 && layout.cp > 1) throw UserError("--ep with --cp: not yet (one of them beside --tp)");
  const int size = layout.ranks();
  const bool fits = data_parallel ? comm::size() % size == 0 : comm::size() == size;
  if (size > 1 && !fits)
    throw UserError(flags + " runs on " + (data_parallel ? "a multiple of " : "") + std::to_string(size) +
                    " ranks (mpirun -n " + std::to_string(size) + " remat ...); this job has " +
                    std::to_string(comm::size()) + (comm::built_with_mpi() ? "" : " (this build has no MPI)"));
  comm::set_layout(layout.tp, layout.cp, layout.ep);
  SplitGroups g;
  g.tp = RankGroup::tensor(layout.tp, comm::rank(comm::Group::tensor), layout.sp);
  g.ep = RankGroup::expert(layout.ep, comm::rank(comm::Group::expert));
  g.cp = RankGroup::context(layout.cp, comm::rank(comm::Group::context));
  // Each context rank's rows draw dropout masks of their own (a replicated
  // tensor's are the same on the tensor ranks beside it: the same place).
  random_ops::set_rank_part(g.cp.split() ? std::uint64_t(g.cp.rank) + 1 : 0);
  return g;
}

}  // namespace

std::string RankLayout::flags() const {
  std::string f;
  const auto add = [&f](const std::string& flag) { f += (f.empty() ? "" : " ") + flag; };
  if (tp > 1 || sp) add("--tp " + std::to_string(tp));
  if (sp) add("--sp");
  if (ep > 1) add("--ep " + std::to_string(ep));
  if (cp > 1) add("--cp " + std::to_string(cp));
  return f.empty() ? "--tp 1" : f;
}

SplitGroups apply_shared_split(const RankLayout& layout) {
  if (layout.sp && layout.tp == 1)
    throw UserError("--sp splits the sequence over a tensor-parallel group: give --tp 2 or more");
  if (!layout.any()) return {};
  return set_rank_groups(layout, /*data_parallel=*/true);
}

bool apply_split(const RankLayout& layout, ModelSetup& setup, bool data_parallel) {
  if (!layout.any()) return false;
  // The layout validated (on rank 0's place: every rank's is alike) before
  // how to start it is said.
  Sizes asked = setup.sizes;
  asked.tp = RankGroup::tensor(layout.tp, 0, layout.sp);
  asked.ep = RankGroup::expert(layout.ep);
  asked.cp = RankGroup::context(layout.cp);
  cp::validate(setup.model, asked);
  tp::validate(setup.model, asked);
  ep::validate(setup.model, asked);
  const SplitGroups g = set_rank_groups(layout, data_parallel);
  setup.sizes.tp = g.tp;
  setup.sizes.ep = g.ep;
  setup.sizes.cp = g.cp;
  quiet_other_ranks();
  return true;
}

int take_data_group_rows(ModelSetup& setup, Batch& batch, const std::string& origin) {
  Sizes& z = setup.sizes;
  const int groups = z.split_over_ranks() ? comm::size(comm::Group::data) : 1;
  if (groups == 1) return 1;
  const std::string split = RankLayout::of(z).flags();
  const std::string model_ranks = std::to_string(comm::size(comm::Group::model));
  if (ep::has_experts(setup.model) && z.router_aux != 0)  // the mean of the groups' aux losses is not the whole batch's
    throw UserError(split + " on " + std::to_string(comm::size()) + " ranks: " + setup.model +
                    "'s load-balancing loss is taken over the whole batch, so data-parallel groups would change it "
                    "(--router-aux 0, or mpirun -n " + model_ranks + ")");
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
  if (other_split) throw UserError("--pp with --tp, --sp, --ep or --cp: not yet");
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

void take_rank_parts(const ModelSetup& setup, std::unique_ptr<ParamStore>& params) {
  if (!setup.sizes.tp.split() && !setup.sizes.ep.split()) return;  // every rank holds the whole model
  const char* flag = split_flag(setup.sizes.ep.size);
  if ((setup.sizes.ep.split() && !params->adapted().empty()) || params->tensors().size() != params->specs().size())
    throw UserError(std::string(flag) + " with --lora: not yet");
  // Adapters a file brought (a golden saved under --lora) split with their weights.
  params = lora_part_of(*params, models().find(setup.model).make(setup.sizes)->params(), setup.sizes.tp);
}

}  // namespace remat
