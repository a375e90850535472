#pragma once
// Sharded parameters, as ZeRO-3 / FSDP shard them, for data-parallel
// training under MPI: each rank keeps 1/N of every parameter (rounded up to
// whole chunks of the gradient norm's summation, kNormChunk values), and the
// optimizer steps those shards (so 1/N of the gradients and of the
// optimizer's state too). A parameter's full values exist only while they
// are gathered:
//   - when a block's forward first reads it (ParamStore's access hook), freed
//     when the block's body ends;
//   - again when backward enters the block, and once more after a
//     checkpointed block's recomputation (FSDP frees what the recomputing
//     forward gathered and gathers it again for backward): one gather more
//     than under `full` per recomputed block, the trade-off this measures;
//   - parameters used outside blocks (embeddings, final norm, head) once per
//     step, until backward ends.
// At 16 bits (an open PrecisionScope) what is gathered is the 16-bit copy the
// step reads, as FSDP's mixed precision does: each rank converts its shard
// and the ranks exchange 16-bit values, so no whole 16-bit copy is kept and
// a gather moves half the bytes. The conversion is element by element, so
// the values are the unsharded copy's, in every gather and recomputation.
// A quantized weight (QLoRA's frozen base, in its own pool) is not sharded:
// every rank keeps it whole and it is never gathered (its shard is empty).
// When backward leaves a block its gradients are complete: they are
// reduce-scattered (each rank receives the other ranks' parts of its shard
// and adds them in rank order, the additions data-parallel training makes,
// so the shards train bitwise as the unsharded run) and the full gradients
// and values are freed.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "zoo/params.hpp"

namespace remat {

class ParamShards final : public BlockHooks {
 public:
  // The tracker's pools for what sharding adds: full values of parameters
  // while gathered, and whole gradients from backward until reduce-scattered.
  static constexpr const char* kGatheredPool = "gathered";
  static constexpr const char* kGatheredLabel = "gathered parameter";
  static constexpr const char* kReducingPool = "reducing";
  static constexpr const char* kReducingLabel = "gradient to reduce";

  // Takes `full`'s values (the same on every rank) and keeps this rank's
  // shards; from now on `full` is gathered on use. Installs the hooks.
  // `precision`: the steps' (what a gather moves, for predicted_bytes).
  // Made in a shape-only run (remat estimate --shard-params), it shards for
  // `ranks` ranks (0: comm::size()) and exchanges nothing: gathered values
  // and whole gradients are allocated and freed exactly when a real run
  // would, so the tracker's pools kGatheredPool and kReducingPool count what
  // a rank of such a run holds.
  explicit ParamShards(ParamStore& full, Precision precision = Precision::fp32, int ranks = 0);
  ~ParamShards() override;
  ParamShards(const ParamShards&) = delete;
  ParamShards& operator=(const ParamShards&) = delete;

  // This rank's shards, 1-D, in the store's order; a trainable parameter's
  // shard carries its gradient shard. What the optimizer steps.
  const std::vector<Tensor>& shards() const { return shards_; }
  // Before each micro-batch: the first one's reduce-scatter sets the
  // gradient shards, the later ones' add to them.
  void begin_micro_batch(bool first);
  // Every parameter's full values, gathered (to read or save them), and freed again.
  void gather_everything();
  void release_everything();
  // Parameter i's whole tensor (its shape) from every rank's `shard` of it
  // (an optimizer buffer): a collective, for saves.
  Tensor unshard(std::size_t i, const Tensor& shard) const;
  // This rank's shard of parameter i's whole `values` (a buffer read back
  // from a run file to resume), the tail padded with zeros as the shards are.
  std::vector<float> shard_of(std::size_t i, const std::vector<float>& values) const;

  // Bytes this rank sends plus receives for one micro-batch whose blocks
  // are recomputed as `recomputed` says (how often the block's body runs
  // again in backward), from the block membership the first forward recorded
  // and the blocks whose backward ran (after a step: the trainer's record).
  std::int64_t predicted_bytes(const std::map<std::string, int>& recomputed) const;
  // The blocks the first forward saw, in forward order.
  const std::vector<std::string>& blocks() const { return block_order_; }
  // The global gradient norm of the shards' gradients, bitwise the
  // unsharded gradient_norm (a collective), and the bytes it sends plus
  // receives on this rank.
  double gradient_norm() const;
  // Per parameter, its gradient's sum of squares as gradient_squares (optim/)
  // adds the unsharded one's, bitwise (a collective, the norm's bytes).
  std::vector<double> gradient_squares() const;
  std::int64_t norm_bytes() const;
  std::int64_t shard_bytes() const;     // this rank's parameter shards
  std::int64_t kept_whole_bytes() const;  // the quantized weights it keeps whole (as allocated)
  std::int64_t gradient_bytes() const;  // its gradient shards

  void body_done(const std::string& block) override;
  void backward_enter(const std::string& block) override;
  void backward_leave(const std::string& block) override;
  void backward_end() override;
  void weight_gradients_done() override;  // reduce-scatters and frees what W made

 private:
  void accessed(std::size_t i);
  void gather(std::size_t i);
  const Tensor& gathered(std::size_t i) const;  // what gather(i) fills: the parameter, or its 16-bit copy
  void reduce_scatter(std::size_t i);
  void count_modelled_exchange(std::size_t i, std::size_t value_bytes) const;
  void release(std::size_t i);
  const std::vector<std::size_t>& members(const std::string& block);  // its parameters, in order
  std::int64_t norm_slots() const;  // chunk sums a rank sends for the norm

  ParamStore& full_;
  std::int64_t gathered_value_bytes_;  // 4, or 2 at 16 bits
  std::vector<Tensor> shards_;
  int ranks_ = 1;                          // the group the parameters are sharded over
  int rank_ = 0;                           // this rank's place in it
  std::vector<std::int64_t> shard_size_;  // values per rank, a multiple of kNormChunk (the tail padded)
  std::vector<std::string> owner_;        // the block that uses it ("" outside blocks or in several)
  std::vector<bool> seen_;
  std::vector<bool> kept_whole_;  // quantized weights: not sharded (their shard is empty)
  std::vector<std::string> block_order_;
  std::vector<Tensor> shape_only_gathered_;  // shape-only: each gathered parameter's stand-in (undefined: released)
  std::map<std::string, std::vector<std::size_t>> members_;  // cache of owner_ by block
  bool first_micro_batch_ = true;
  std::string in_backward_of_;  // the block whose backward runs ("": none)
  // The blocks whose backward ran (a frozen block below every trainable
  // parameter runs none: gathered once a step, in forward, not again).
  std::set<std::string> backward_ran_;
  std::unique_ptr<BlockHooksScope> hooks_;  // this, installed while it lives
};

}  // namespace remat
