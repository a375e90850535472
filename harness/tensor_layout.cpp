#include "harness/tensor_layout.hpp"

#include <cstdio>

#include "autodiff/elementwise.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "strategies/registry.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

RankGroup tensor_group(int size) {
  if (size < 1) throw UserError("--tp " + std::to_string(size) + ": a group has at least one rank");
  if (size > 1 && comm::size() != size)
    throw UserError("--tp " + std::to_string(size) + " runs on " + std::to_string(size) + " ranks (mpirun -n " +
                    std::to_string(size) + " remat ...); this job has " + std::to_string(comm::size()) +
                    (comm::built_with_mpi() ? "" : " (this build has no MPI)"));
  return {size, size > 1 ? comm::rank() : 0};
}

void split_over_ranks(int size, bool sequence, ModelSetup& setup, std::unique_ptr<ParamStore>& params) {
  if (size == 1 && !sequence) return;
  setup.sizes.tp = {size, 0, sequence};
  tp::validate(setup.model, setup.sizes);  // a layout that cannot be is said before how to start it
  setup.sizes.tp = tensor_group(size);
  setup.sizes.tp.sequence = sequence;
  if (!params->adapted().empty() || params->tensors().size() != params->specs().size())
    throw UserError("--tp with --lora: not yet");
  const auto specs = models().find(setup.model).make(setup.sizes)->params();
  params = tp::part_of(*params, specs, setup.sizes.tp);
  if (setup.sizes.tp.rank != 0 && !std::freopen("/dev/null", "w", stdout))
    throw std::runtime_error("rank " + std::to_string(setup.sizes.tp.rank) + ": cannot silence stdout");
}

void require_same_plan_on_every_rank(const RankGroup& tp, const std::vector<std::string>& strategies) {
  if (!tp.split()) return;
  for (const std::string& spec : strategies)
    if (parse_strategy(spec).planned)
      throw UserError("--tp with " + spec + ": not yet (a plan from timed costs could differ between the ranks)");
}

std::unique_ptr<ParamStore> gather_whole(const ModelSetup& setup, const ParamStore& parts) {
  ModelSetup whole_setup = setup;
  whole_setup.sizes.tp = {};
  const auto whole_specs = models().find(setup.model).make(whole_setup.sizes)->params();
  auto whole = std::make_unique<ParamStore>(whole_specs, DType::f32);
  whole->zero_grad();
  const int ranks = setup.sizes.tp.size;
  for (std::size_t i = 0; i < parts.specs().size(); ++i) {
    const ParamSpec& spec = parts.specs()[i];
    const Tensor& whole_t = whole->tensors()[i];
    if (whole->names()[i] != spec.name) throw std::logic_error("gather_whole: parameters out of order at " + spec.name);
    const auto join = [&](const Tensor& part, const Tensor& into) {
      const std::vector<double> mine = part.to_host_f64();
      std::vector<double> all(mine.size() * std::size_t(ranks));
      comm::gather_all(mine.data(), std::int64_t(mine.size()), all.data());
      std::vector<std::vector<double>> by_rank(static_cast<std::size_t>(ranks));
      for (int r = 0; r < ranks; ++r)
        by_rank[r].assign(all.begin() + std::int64_t(r) * std::int64_t(mine.size()),
                          all.begin() + std::int64_t(r + 1) * std::int64_t(mine.size()));
      convert_into(into, Tensor::from_host(tp::join_parts(by_rank, spec, whole_t.shape()), whole_t.shape()));
    };
    join(parts.tensors()[i], whole_t);
    if (parts.trainable(i) && parts.tensors()[i].grad().defined()) join(parts.tensors()[i].grad(), whole_t.grad());
  }
  return whole;
}

}  // namespace remat
