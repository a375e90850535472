#include "train/reduction.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "autodiff/backend.hpp"
#include "autodiff/elementwise.hpp"
#include "autodiff/memory_tracker.hpp"
#include "comm/comm.hpp"
#include "optim/optimizer.hpp"
#include "step/step.hpp"
#include "train/param_shards.hpp"
#include "train/tensor_parts.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

// Every data-parallel rank's losses, added in rank order.
double sum_over_ranks(double loss) { return comm::sum_in_rank_order(loss, comm::Group::data); }

// One process: each micro-batch's gradient is computed fresh and added to
// the sum in micro-batch order, sum = g0; sum += g1; ... the additions, in
// the order, of a data-parallel reduction over ranks.
class LocalAccumulation final : public GradientReduction {
 public:
  // The sums in a pool of their own: state beside the gradients, never a
  // step's activations (a pipeline stage makes them amid its step).
  static constexpr const char* kSumLabel = "gradient_sum";
  static constexpr const char* kSumPool = "gradient sums";
  LocalAccumulation(ParamStore& params, int accumulate) : GradientReduction(params, accumulate, 1, 0) {
    MemoryTracker::instance().pool_for_label(kSumLabel, kSumPool);
  }
  void begin(int k) override {
    if (k == 0) sums_.clear();  // (a step's first micro-batch; finish() leaves none either)
  }
  void add(int k, double loss) override {
    add_loss(k, loss);
    if (accumulate_ == 1) return;  // the gradients are where they belong already
    for (std::size_t i = 0; i < params_.tensors().size(); ++i) fold(i);
  }
  void add_part(int, const std::vector<std::size_t>& only) override {
    for (std::size_t i : only) fold(i);
  }
  void add_loss(int k, double loss) override { loss_ = k == 0 ? loss : loss_ + loss; }
  double finish() override {
    const auto& ts = params_.tensors();
    for (std::size_t i = 0; i < sums_.size(); ++i)
      if (sums_[i].defined()) backend::copy(ts[i].grad(), sums_[i]);
    sums_.clear();
    return loss_;
  }
  std::int64_t predicted_bytes(const Strategy&) const override { return 0; }

 private:
  // Parameter i's gradient into its sum: the first micro-batch's copied, each next one's added.
  void fold(std::size_t i) {
    const Tensor g = params_.tensors()[i].grad();  // undefined for a frozen parameter
    if (!g.defined()) return;
    if (sums_.empty()) sums_.resize(params_.tensors().size());
    if (!sums_[i].defined()) {
      sums_[i] = Tensor::empty(g.shape(), g.dtype(), kSumLabel);
      backend::copy(sums_[i], g);
    } else {
      add_inplace(sums_[i], g);
    }
  }

  std::vector<Tensor> sums_;
  double loss_ = 0;
};

// Several ranks, whole parameters: micro-batch m of a step runs on rank
// m % N. After each round of one micro-batch per rank, every rank gathers
// the round's gradients and losses and adds them to its running sums in
// micro-batch order, the additions one process makes with --accumulate M.
class DataParallel final : public GradientReduction {
 public:
  DataParallel(ParamStore& params, int accumulate)
      : GradientReduction(params, accumulate, comm::size(comm::Group::data), comm::rank(comm::Group::data)) {}
  void begin(int k) override {
    if (k == 0) sums_.clear();  // (a step's first micro-batch; finish() leaves none either)
  }
  void add(int k, double loss) override {
    add_loss(k, loss);
    for (std::size_t i = 0; i < params_.tensors().size(); ++i) fold(i);
  }
  void add_part(int, const std::vector<std::size_t>& only) override {
    for (std::size_t i : only) fold(i);
  }
  void add_loss(int k, double loss) override { loss_ = (k == 0 ? 0 : loss_) + sum_over_ranks(loss); }
  double finish() override {
    const auto& ts = params_.tensors();
    for (std::size_t i = 0; i < sums_.size(); ++i)
      if (!sums_[i].empty()) backend::upload(ts[i].grad(), sums_[i]);
    sums_.clear();
    return loss_;
  }
  std::int64_t predicted_bytes(const Strategy&) const override {
    return data_parallel_bytes(params_, ranks_, accumulate_);
  }

 private:
  // Parameter i's gradient of this round, every rank's, into its sum in
  // micro-batch order: the first one's assigned, each next one's added.
  void fold(std::size_t i) {
    const Tensor g = params_.tensors()[i].grad();  // undefined for a frozen parameter, on every rank
    if (!g.defined()) return;
    const int N = ranks_;
    const std::vector<float> mine = g.to_host_f32();
    const std::int64_t n = g.numel();
    std::vector<float> all(std::size_t(n) * std::size_t(N));
    comm::gather_all(mine.data(), n, all.data(), comm::Group::data);
    if (sums_.empty()) sums_.resize(params_.tensors().size());
    auto& sum = sums_[i];
    for (int r = 0; r < N; ++r) {
      const float* part = all.data() + std::size_t(r) * std::size_t(n);
      if (sum.empty()) sum.assign(part, part + n);
      else
        for (std::int64_t j = 0; j < n; ++j) sum[std::size_t(j)] += part[j];
    }
  }

  std::vector<std::vector<float>> sums_;
  double loss_ = 0;
};

// ZeRO-3: gradients flow whole and fresh through each micro-batch's
// backward and are reduce-scattered block by block into this rank's
// gradient shards (train/param_shards.hpp); the optimizer steps the shards.
class ShardedParameters final : public GradientReduction {
 public:
  ShardedParameters(ParamStore& params, int accumulate, Precision precision)
      : GradientReduction(params, accumulate, comm::size(comm::Group::data), comm::rank(comm::Group::data)),
        shards_(std::make_unique<ParamShards>(params, precision)) {}
  bool zero_grad() const override { return false; }
  void begin(int k) override {
    shards_->begin_micro_batch(k == 0);
    auto& tracker = MemoryTracker::instance();
    gathered_base_ = tracker.stats(ParamShards::kGatheredPool).live;
    reducing_base_ = tracker.stats(ParamShards::kReducingPool).live;
  }
  void add(int k, double loss) override {
    auto& tracker = MemoryTracker::instance();
    gathered_peak_ = std::max(gathered_peak_, tracker.stats(ParamShards::kGatheredPool).peak - gathered_base_);
    reducing_peak_ = std::max(reducing_peak_, tracker.stats(ParamShards::kReducingPool).peak - reducing_base_);
    loss_ = (k == 0 ? 0 : loss_) + sum_over_ranks(loss);
  }
  double finish() override { return loss_; }
  const std::vector<Tensor>& trained() const override { return shards_->shards(); }
  double gradient_norm() const override { return shards_->gradient_norm(); }
  std::vector<double> gradient_squares() const override { return shards_->gradient_squares(); }
  std::int64_t predicted_bytes(const Strategy& strategy) const override {
    std::map<std::string, int> recomputed;
    const auto& blocks = shards_->blocks();
    for (std::size_t b = 0; b < blocks.size(); ++b)
      recomputed[blocks[b]] = strategy.reruns({int(b), int(blocks.size()), blocks[b]});
    return std::int64_t(accumulate_) * shards_->predicted_bytes(recomputed) + shards_->norm_bytes();
  }
  RankMemory memory(const Optimizer& optimizer) const override {
    RankMemory m = GradientReduction::memory(optimizer);
    m.parameters = shards_->shard_bytes() + shards_->kept_whole_bytes();
    m.gradients = shards_->gradient_bytes();
    m.gathered_peak = gathered_peak_;
    m.reducing_peak = reducing_peak_;
    return m;
  }
  void gather_weights() override { shards_->gather_everything(); }
  void release_weights() override { shards_->release_everything(); }
  Tensor whole(std::size_t i, const Tensor& buffer) const override { return shards_->unshard(i, buffer); }
  std::vector<float> mine(std::size_t i, const std::vector<float>& whole) const override {
    return shards_->shard_of(i, whole);
  }

 private:
  std::unique_ptr<ParamShards> shards_;
  std::int64_t gathered_base_ = 0, reducing_base_ = 0, gathered_peak_ = 0, reducing_peak_ = 0;
  double loss_ = 0;
};

// Tensor parallelism: each tensor group of ranks is one replica, each rank
// holding its parts of the split parameters (zoo/tensor_parallel.hpp) and
// training them as one process does its whole ones; the replicas reduce
// their gradients as `inner` says (one replica: locally; several: data
// parallel over the data group). What needs the whole (the gradient norm, a
// save) is summed or gathered over the tensor group.
class TensorParallel final : public GradientReduction {
 public:
  TensorParallel(ParamStore& params, int accumulate, const ModelSetup& setup, std::unique_ptr<GradientReduction> inner)
      : GradientReduction(params, accumulate, inner->ranks(), comm::rank(comm::Group::data)),
        setup_(setup),
        inner_(std::move(inner)) {
    for (const auto& spec : params.specs()) whole_shapes_.push_back(tp::whole_shape(spec, setup.sizes.tp.size));
  }
  bool zero_grad() const override { return inner_->zero_grad(); }
  void begin(int k) override { inner_->begin(k); }
  void add(int k, double loss) override { inner_->add(k, loss); }
  double finish() override { return inner_->finish(); }
  const std::vector<Tensor>& trained() const override { return inner_->trained(); }
  double gradient_norm() const override {
    return split_gradient_norm(params_, inner_->gradient_squares(), setup_.sizes.tp);
  }
  // Its parts' squares as the replicas hold them (sharded: summed over the shards), for a norm over a grid.
  std::vector<double> gradient_squares() const override { return inner_->gradient_squares(); }
  // Sharded over the data group, a rank's parts are gathered and released by the shards.
  void gather_weights() override { inner_->gather_weights(); }
  void release_weights() override { inner_->release_weights(); }
  // The replicas' reduction, and the norm's one value each way to each other rank of the group (the
  // activations' collectives are the step's own).
  std::int64_t predicted_bytes(const Strategy& strategy) const override {
    return inner_->predicted_bytes(strategy) + 2 * 8 * (setup_.sizes.tp.size - 1);
  }
  RankMemory memory(const Optimizer& optimizer) const override { return inner_->memory(optimizer); }
  Tensor whole(std::size_t i, const Tensor& buffer) const override {
    return whole_of(inner_->whole(i, buffer), params_.specs()[i], whole_shapes_[i], setup_.sizes.tp.size);
  }
  std::unique_ptr<ParamStore> whole_params() const override { return whole_store(setup_, params_, false); }
  std::vector<float> mine(std::size_t i, const std::vector<float>& whole) const override {
    const auto part = tp::part_values(std::vector<double>(whole.begin(), whole.end()), params_.specs()[i],
                                      whole_shapes_[i], setup_.sizes.tp);
    return inner_->mine(i, std::vector<float>(part.begin(), part.end()));  // and of it, a shard where sharded
  }

 private:
  ModelSetup setup_;
  std::unique_ptr<GradientReduction> inner_;
  std::vector<Shape> whole_shapes_;
};

// Expert parallelism (zoo/expert_parallel.hpp): each group of ranks holds
// the experts between them and runs its batches' sequences between them;
// the groups train data-parallel (`inner`: the same rank of every group
// holds the same experts). After the micro-batches a layer every rank holds
// has, on each, the gradient of its own sequences: summed here over the
// group, in rank order, so every rank steps it alike; an expert's gradient
// is whole on the rank holding it.
class ExpertParallel final : public GradientReduction {
 public:
  ExpertParallel(ParamStore& params, int accumulate, const ModelSetup& setup, std::unique_ptr<GradientReduction> inner)
      : GradientReduction(params, accumulate, inner->ranks(), comm::rank(comm::Group::data)),
        setup_(setup),
        inner_(std::move(inner)) {}
  bool zero_grad() const override { return inner_->zero_grad(); }
  void begin(int k) override { inner_->begin(k); }
  void add(int k, double loss) override { inner_->add(k, loss); }
  // The shared layers' gradients (or, sharded, their shards: every rank of
  // the group holds the same slices) summed over the group.
  double finish() override {
    const double loss = inner_->finish();
    for (std::size_t i = 0; i < params_.tensors().size(); ++i) {
      const Tensor g = inner_->trained()[i].grad();
      if (!g.defined() || !shared(i)) continue;
      backend::upload(g, comm::sum_in_rank_order(g.to_host_f32(), comm::Group::expert));
    }
    return loss;
  }
  const std::vector<Tensor>& trained() const override { return inner_->trained(); }
  double gradient_norm() const override {
    const std::vector<double> squares = inner_->gradient_squares();
    if (setup_.sizes.tp.split()) return grid_gradient_norm(params_, squares, setup_.sizes);  // its parts too
    double total = 0, experts = 0;  // the shared layers' (the same on every rank), this rank's experts'
    for (std::size_t i = 0; i < squares.size(); ++i) (shared(i) ? total : experts) += squares[i];
    std::vector<double> all(std::size_t(setup_.sizes.ep.size));
    comm::gather_all(&experts, 1, all.data(), comm::Group::expert);
    for (double s : all) total += s;  // in rank order: every rank the same
    return std::sqrt(total);
  }
  // The groups' reduction (its norm's part included); in the group, the
  // shared layers' gradients, each rank's to every other, and the norm's one value.
  std::int64_t predicted_bytes(const Strategy& strategy) const override {
    std::int64_t values = 0;
    for (std::size_t i = 0; i < params_.tensors().size(); ++i)
      if (params_.trainable(i) && shared(i)) values += inner_->trained()[i].numel();
    // Beside a tensor split (`inner`: its norm's value over the tensor group), the split experts' over the model's ranks.
    const std::int64_t grid = setup_.sizes.tp.split() ? 2 * 8 * std::int64_t(setup_.sizes.tp.size * setup_.sizes.ep.size - 1) : 0;
    return inner_->predicted_bytes(strategy) + 2 * (4 * values + 8) * std::int64_t(setup_.sizes.ep.size - 1) + grid;
  }
  RankMemory memory(const Optimizer& optimizer) const override { return inner_->memory(optimizer); }
  void gather_weights() override { inner_->gather_weights(); }
  void release_weights() override { inner_->release_weights(); }
  std::unique_ptr<ParamStore> whole_params() const override { return whole_store(setup_, params_, false); }
  std::vector<Tensor> whole_buffers(const std::vector<Tensor>& buffers) const override {
    std::vector<Tensor> mine(buffers.size());  // whole parameters' shapes, unsharded where sharded
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].defined()) mine[i] = inner_->whole(i, buffers[i]);
    return whole_expert_buffers(setup_, params_, mine);
  }
  std::vector<float> mine(std::size_t i, const std::vector<float>& whole) const override { return inner_->mine(i, whole); }

 private:
  bool shared(std::size_t i) const { return ep::owner(params_.names()[i], setup_.sizes) < 0; }

  ModelSetup setup_;
  std::unique_ptr<GradientReduction> inner_;
};

}  // namespace

std::vector<Tensor> GradientReduction::whole_buffers(const std::vector<Tensor>& buffers) const {
  std::vector<Tensor> whole(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].defined()) whole[i] = this->whole(i, buffers[i]);
  return whole;
}

GradientReduction::GradientReduction(ParamStore& params, int accumulate, int ranks, int rank)
    : params_(params), ranks_(ranks), accumulate_(accumulate), rank_(rank) {}

std::uint64_t GradientReduction::micro_batch(int k) const {
  return std::uint64_t(k) * std::uint64_t(ranks_) + std::uint64_t(rank_);
}

namespace {

// Ranks that hold the whole model and split a step's work (the job's
// model-parallel groups of consecutive ranks): pipeline parallelism
// (pipeline/), each rank computing the gradients of its own stage's
// parameters, zeros elsewhere; context parallelism (zoo/context_parallel.hpp),
// each rank those of its rows of the sequence. `inner` combines each rank's
// micro-batches, and those of the data-parallel groups (the same place in
// every group). Then the gradients are summed over the group in rank order
// (under a pipeline x + 0 = x: each parameter's is its stage's, bit for bit),
// and so are the losses (the last stage's alone are not zero; the rows'
// shares), so every rank steps the whole model alike.
class SummedOverGroup final : public GradientReduction {
 public:
  // `group`: the pipeline's stages (comm's tensor group) or the context group.
  SummedOverGroup(ParamStore& params, int accumulate, comm::Group group, std::unique_ptr<GradientReduction> inner)
      : GradientReduction(params, accumulate, inner->ranks(), comm::rank(comm::Group::data)),
        group_(group),
        inner_(std::move(inner)) {}
  bool zero_grad() const override { return inner_->zero_grad(); }
  void begin(int k) override { inner_->begin(k); }
  void add(int k, double loss) override { inner_->add(k, loss); }
  void add_part(int k, const std::vector<std::size_t>& only) override { inner_->add_part(k, only); }
  void add_loss(int k, double loss) override { inner_->add_loss(k, loss); }
  double finish() override {
    const double loss = inner_->finish();
    // What the replicas train (sharded: this rank's shards, the same slices on every rank of the group).
    for (const Tensor& t : inner_->trained())
      if (const Tensor g = t.grad(); g.defined()) backend::upload(g, comm::sum_in_rank_order(g.to_host_f32(), group_));
    return comm::sum_in_rank_order(loss, group_);
  }
  // The rest as the replicas' reduction has it (their state is every rank's of the group alike).
  const std::vector<Tensor>& trained() const override { return inner_->trained(); }
  double gradient_norm() const override { return inner_->gradient_norm(); }
  std::vector<double> gradient_squares() const override { return inner_->gradient_squares(); }
  RankMemory memory(const Optimizer& optimizer) const override { return inner_->memory(optimizer); }
  void gather_weights() override { inner_->gather_weights(); }
  void release_weights() override { inner_->release_weights(); }
  Tensor whole(std::size_t i, const Tensor& buffer) const override { return inner_->whole(i, buffer); }
  std::vector<float> mine(std::size_t i, const std::vector<float>& whole) const override { return inner_->mine(i, whole); }
  // The replicas' reduction, and every trainable gradient and the loss to
  // and from each other rank of the pipeline (the activations' messages
  // between stages are the step's own).
  std::int64_t predicted_bytes(const Strategy& strategy) const override {
    std::int64_t trainable = 0;
    for (std::size_t i = 0; i < params_.tensors().size(); ++i)
      if (params_.trainable(i)) trainable += inner_->trained()[i].numel();
    return inner_->predicted_bytes(strategy) + 2 * (4 * trainable + 8) * (comm::size(group_) - 1);
  }

 private:
  comm::Group group_;
  std::unique_ptr<GradientReduction> inner_;
};

}  // namespace

namespace {
[[noreturn]] void not_in_parts() {
  throw std::logic_error("GradientReduction: folding in parts is an interleaved pipeline's, over whole parameters");
}
}  // namespace

void GradientReduction::add_part(int, const std::vector<std::size_t>&) { not_in_parts(); }
void GradientReduction::add_loss(int, double) { not_in_parts(); }

double GradientReduction::gradient_norm() const { return remat::gradient_norm(trained()); }

std::vector<double> GradientReduction::gradient_squares() const { return remat::gradient_squares(params_.tensors()); }

RankMemory GradientReduction::memory(const Optimizer& optimizer) const {
  RankMemory m;
  for (const auto& name : optimizer.state_names())
    for (const Tensor& t : optimizer.state(name))
      if (t.defined()) m.optimizer += std::int64_t(MemoryTracker::counted_bytes(t.nbytes()));
  m.parameters = params_.bytes();  // (as allocated, as the estimate's tracker counts them)
  for (const Tensor& t : params_.tensors())
    if (t.grad().defined()) m.gradients += std::int64_t(MemoryTracker::counted_bytes(t.grad().nbytes()));
  return m;
}

std::unique_ptr<GradientReduction> make_reduction(ParamStore& params, int accumulate, bool shard_params,
                                                  const ModelSetup& setup, Precision precision, int pipeline_stages) {
  const bool replicated = comm::size(comm::Group::data) > 1;
  if (pipeline_stages > 1) {
    std::unique_ptr<GradientReduction> replicas;
    if (replicated) replicas = std::make_unique<DataParallel>(params, accumulate);
    else replicas = std::make_unique<LocalAccumulation>(params, accumulate);
    return std::make_unique<SummedOverGroup>(params, accumulate, comm::Group::tensor, std::move(replicas));
  }
  if (setup.sizes.tp.split() || setup.sizes.ep.split() || setup.sizes.cp.split()) {
    std::unique_ptr<GradientReduction> replicas;
    if (shard_params) replicas = std::make_unique<ShardedParameters>(params, accumulate, precision);
    else if (replicated) replicas = std::make_unique<DataParallel>(params, accumulate);
    else replicas = std::make_unique<LocalAccumulation>(params, accumulate);
    // Under --cp each rank's gradients are its rows' shares: summed over the context group.
    if (setup.sizes.cp.split())
      replicas = std::make_unique<SummedOverGroup>(params, accumulate, comm::Group::context, std::move(replicas));
    // A tensor split's parts joined first, then the experts over their ranks.
    if (setup.sizes.tp.split())
      replicas = std::make_unique<TensorParallel>(params, accumulate, setup, std::move(replicas));
    if (setup.sizes.ep.split()) return std::make_unique<ExpertParallel>(params, accumulate, setup, std::move(replicas));
    return replicas;
  }
  if (shard_params) return std::make_unique<ShardedParameters>(params, accumulate, precision);
  if (comm::size() > 1) return std::make_unique<DataParallel>(params, accumulate);
  return std::make_unique<LocalAccumulation>(params, accumulate);
}

std::int64_t data_parallel_bytes(const ParamStore& params, int ranks, int accumulate) {
  std::int64_t trainable = 0;
  for (std::size_t i = 0; i < params.tensors().size(); ++i)
    if (params.trainable(i)) trainable += params.tensors()[i].numel();
  const std::int64_t part = 4 * trainable + 8;
  return 2 * part * std::int64_t(ranks - 1) * accumulate;
}

}  // namespace remat
