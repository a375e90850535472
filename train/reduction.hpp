#pragma once
// How a training step's gradients are combined across its micro-batches and
// ranks, one class per mode:
//   - LocalAccumulation: one process, K micro-batches summed in order;
//   - DataParallel: N ranks, each round's gradients gathered and summed in
//     micro-batch order (the additions one process makes with K N);
//   - ShardedParameters: ZeRO-3, each rank keeps 1/N of every parameter,
//     gradient and optimizer state (train/param_shards.hpp).
// Every mode trains bitwise as one process accumulating the same batches,
// and predicts its communication byte for byte. A new parallel mode is one
// more class here.
#include <cstdint>
#include <memory>
#include <vector>

#include "autodiff/tensor.hpp"
#include "strategies/strategy.hpp"
#include "zoo/model.hpp"
#include "zoo/params.hpp"

namespace remat {

class Optimizer;

// What one rank holds besides activations, in bytes: whole parameters,
// gradients and optimizer state, or under --shard-params its shards of them
// and the most whole parameters gathered at once.
struct RankMemory {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer = 0;
  std::int64_t gathered_peak = 0;
  std::int64_t reducing_peak = 0;  // whole gradients awaiting their reduce-scatter, at most
};

class GradientReduction {
 public:
  // `ranks` and `rank`: the data-parallel ones (the job's, by default).
  GradientReduction(ParamStore& params, int accumulate, int ranks, int rank);
  virtual ~GradientReduction() = default;

  int ranks() const { return ranks_; }
  int accumulate() const { return accumulate_; }
  int micro_batches() const { return ranks_ * accumulate_; }  // M of one step, over every rank
  // The index, among the step's M micro-batches, of this rank's k-th.
  std::uint64_t micro_batch(int k) const;
  // Whether a micro-batch's backward starts from zeroed parameter gradients.
  virtual bool zero_grad() const { return true; }
  virtual void begin(int k) { (void)k; }  // before this rank's k-th micro-batch
  // After it, its gradients in the parameters: fold them (and its loss) in.
  virtual void add(int k, double loss) = 0;
  // The same in parts, for an interleaved pipeline, where a micro-batch's
  // backward on a rank spans its chunks with others' passes between them:
  // the parameters `only` (a chunk's, whose gradients of micro-batch k are
  // whole now; each parameter once per micro-batch, in micro-batch order),
  // and the loss once. Only the modes a pipeline runs (whole parameters).
  virtual void add_part(int k, const std::vector<std::size_t>& only);
  virtual void add_loss(int k, double loss);
  // After the last: the M micro-batches' gradients, summed, where the
  // optimizer reads them (trained()); returns the summed loss.
  virtual double finish() = 0;
  // What the optimizer steps: the parameters, or this rank's shards.
  virtual const std::vector<Tensor>& trained() const { return params_.tensors(); }
  // The global norm of those gradients (every rank's the same).
  virtual double gradient_norm() const;
  // Per parameter of params(), its gradient's sum of squares (every rank's
  // the same; a collective where sharded).
  virtual std::vector<double> gradient_squares() const;
  // Bytes this rank sends plus receives in one step under `strategy`.
  virtual std::int64_t predicted_bytes(const Strategy& strategy) const = 0;
  virtual RankMemory memory(const Optimizer& optimizer) const;

  // Saves and the end of a run want whole weights: gather them (a
  // collective) and let them go again; an optimizer buffer of parameter i
  // as the whole parameter's shape.
  virtual void gather_weights() {}
  virtual void release_weights() {}
  virtual Tensor whole(std::size_t i, const Tensor& buffer) const { (void)i; return buffer; }
  // An optimizer state's buffers (one per parameter here, undefined where
  // frozen) as the whole model's, in whole_params()' order (a collective).
  virtual std::vector<Tensor> whole_buffers(const std::vector<Tensor>& buffers) const;
  // The whole parameters where params() holds parts of them (tensor
  // parallelism: a collective), else null: params() are whole.
  virtual std::unique_ptr<ParamStore> whole_params() const { return nullptr; }
  // What this rank keeps of a whole optimizer buffer of parameter i (read
  // back from a run file): all of it, or its part under tensor parallelism.
  virtual std::vector<float> mine(std::size_t i, const std::vector<float>& whole) const {
    (void)i;
    return whole;
  }

 protected:
  ParamStore& params_;
  int ranks_, accumulate_, rank_;
};

// The mode a configuration asks for: sharded, data parallel (several ranks),
// tensor parallel (`setup`'s sizes split: its ranks one replica), expert
// parallel (the job one expert group), pipeline parallel (`pipeline_stages`
// > 1: the job's model-parallel groups are pipelines), context parallel
// (the groups split the sequence), or local.
// Sharded parameters take over `params` (train/param_shards.hpp) and gather
// in the steps' `precision`.
std::unique_ptr<GradientReduction> make_reduction(ParamStore& params, int accumulate, bool shard_params,
                                                  const ModelSetup& setup, Precision precision = Precision::fp32,
                                                  int pipeline_stages = 1);

// The bytes a rank sends plus receives in one data-parallel step: each of
// the accumulate rounds gathers every trainable gradient (float32) and the
// loss (float64) from each of the other ranks, and sends its own to each of
// them. Exact: the recorded comm_bytes equal it.
std::int64_t data_parallel_bytes(const ParamStore& params, int ranks, int accumulate);

}  // namespace remat
