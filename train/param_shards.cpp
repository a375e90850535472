#include "train/param_shards.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>

#include "autodiff/backend.hpp"
#include "autodiff/bfloat16.hpp"
#include "autodiff/float16.hpp"
#include "autodiff/elementwise.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"

namespace remat {
namespace {

// The ranks the parameters are sharded over: the data group (the whole job
// without tensor parallelism; under it, the ranks holding the same parts).
constexpr comm::Group kGroup = comm::Group::data;

void upload(const std::vector<float>& v, const Tensor& t) { backend::upload(t, v.data(), v.size() * sizeof(float)); }

// Every rank's `mine` (s values each) into `whole`'s new storage: the last
// part's padding goes.
template <class T>
void gather_into(std::vector<T> mine, const Tensor& whole) {
  std::vector<T> all(mine.size() * std::size_t(comm::size(kGroup)));
  comm::gather_all(mine.data(), std::int64_t(mine.size()), all.data(), kGroup);
  mine = {};
  whole.refill(Tensor::Bytes(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(ParamShards::kGatheredLabel)),
                             whole.nbytes()));
  backend::upload(whole, all.data(), whole.nbytes());
}

}  // namespace

ParamShards::ParamShards(ParamStore& full, Precision precision, int ranks)
    : full_(full), gathered_value_bytes_(std::int64_t(dtype_size(compute_dtype(precision, DType::f32)))) {
  MemoryTracker::instance().pool_for_label(kGatheredLabel, kGatheredPool);
  MemoryTracker::instance().pool_for_label(kReducingLabel, kReducingPool);
  const int N = ranks > 0 ? ranks : comm::size(kGroup), r = ranks > 0 ? 0 : comm::rank(kGroup);
  ranks_ = N;
  rank_ = r;
  const auto& ts = full.tensors();
  shape_only_gathered_.resize(ts.size());
  kept_whole_.assign(ts.size(), false);
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (full.quantized(full.names()[i])) {  // QLoRA's frozen base: kept whole on every rank, never gathered
      kept_whole_[i] = true;
      shard_size_.push_back(0);
      shards_.push_back(Tensor::zeros({0}, DType::f32, full.names()[i]));
      continue;
    }
    if (ts[i].dtype() != DType::f32) throw UserError("--shard-params: parameters must be float32");
    // 1/N of the values, rounded up to whole chunks of the gradient norm's
    // summation (so the sharded norm adds what the unsharded one adds).
    const std::int64_t n = ts[i].numel(), s = (n + N * kNormChunk - 1) / (N * kNormChunk) * kNormChunk;
    shard_size_.push_back(s);
    Tensor shard = full.trainable(i) ? Tensor::parameter({s}, DType::f32, full.names()[i])
                                     : Tensor::zeros({s}, DType::f32, full.names()[i]);
    if (!shape_only()) {  // (no values to read in a shape-only run, and no host to hold a real model's)
      upload(shard_of(i, ts[i].to_host_f32()), shard);
    }
    // Gradient shards are allocated once and kept, as ParamStore::zero_grad
    // keeps whole gradients: memory from before a step, not the step's.
    if (full.trainable(i))
      shard.slot()->grad = std::make_shared<Tensor>(Tensor::zeros({s}, DType::f32, "grad." + full.names()[i]));
    shards_.push_back(shard);
    ts[i].release();
    if (ts[i].slot()) {  // gradients flow fresh into each step, counted apart, then are scattered
      ts[i].slot()->grad.reset();
      ts[i].slot()->grad_label = kReducingLabel;
    }
  }
  owner_.assign(ts.size(), "");
  seen_.assign(ts.size(), false);
  full_.set_access_hook([this](std::size_t i) { accessed(i); });
  hooks_ = std::make_unique<BlockHooksScope>(this);
}

ParamShards::~ParamShards() {
  hooks_.reset();
  full_.set_access_hook(nullptr);
  for (const Tensor& t : full_.tensors())
    if (t.slot()) t.slot()->grad_label = nullptr;
}

void ParamShards::begin_micro_batch(bool first) {
  first_micro_batch_ = first;
  // A parameter no gradient reaches this step keeps a zero gradient, as an
  // unsharded one does after zero_grad (the others' are overwritten).
  if (first)
    for (const Tensor& s : shards_)
      if (s.requires_grad()) fill(s.grad(), 0.0);
}

void ParamShards::accessed(std::size_t i) {
  if (kept_whole_[i]) return;
  const std::string& block = current_block();
  if (!seen_[i]) {
    seen_[i] = true;
    owner_[i] = block;
    members_.clear();
    if (!block.empty() && std::find(block_order_.begin(), block_order_.end(), block) == block_order_.end())
      block_order_.push_back(block);
  } else if (owner_[i] != block) {
    owner_[i] = "";  // read in two places: it stays gathered for the whole step
    members_.clear();
  }
  gather(i);
}

// Every rank gathers the same parameters in the same order (the same model
// runs the same schedule on each), so the collectives match.
void ParamShards::gather(std::size_t i) {
  if (kept_whole_[i]) return;
  const Tensor& whole = gathered(i);
  if (shape_only()) {  // the bytes of the whole values, in the gathered pool, and no exchange
    if (!shape_only_gathered_[i].defined()) {
      shape_only_gathered_[i] = Tensor::empty(whole.shape(), whole.dtype(), kGatheredLabel);
      count_modelled_exchange(i, dtype_size(whole.dtype()));
    }
    return;
  }
  if (whole.resident()) return;
  // A step's gathers are what predicted_bytes counts (a save's, outside a step, gathers float32).
  if (full_.copying() && std::int64_t(dtype_size(whole.dtype())) != gathered_value_bytes_)
    throw std::logic_error("ParamShards: gathering " + std::string(dtype_name(whole.dtype())) +
                           " values, made for a precision of " + std::to_string(gathered_value_bytes_) + "-byte ones");
  std::vector<float> mine = shards_[i].to_host_f32();
  if (whole.dtype() == DType::f32) return gather_into(std::move(mine), whole);
  // This rank's shard in 16 bits, made afresh (rounded as the unsharded
  // copy's conversion rounds each element).
  std::vector<std::uint16_t> low(mine.size());
  const bool bf = whole.dtype() == DType::bf16;
  for (std::size_t j = 0; j < mine.size(); ++j) low[j] = bf ? bf16(mine[j]).bits : f16(mine[j]).bits;
  gather_into(std::move(low), whole);
}

// What a device model prices a shape-only step's exchanges by: this rank's
// shard of `i`, sent to each other rank. (A real step's exchanges are not in
// its stats: the trainer predicts them apart, with predicted_bytes.)
void ParamShards::count_modelled_exchange(std::size_t i, std::size_t value_bytes) const {
  stats::count_communication(double(value_bytes) * double(shard_size_[i]) * double(ranks_ - 1));
}

const Tensor& ParamShards::gathered(std::size_t i) const {
  const Tensor& master = full_.tensors()[i];
  if (!full_.copying()) return master;
  Tensor& copy = full_.copy_of(i);
  if (!copy.defined()) {  // the store's copy of it, with the master's gradient slot, filled by each gather
    copy = Tensor::unfilled(master.shape(), full_.copy_dtype());
    copy.attach_slot(master.slot());
  }
  return copy;
}

void ParamShards::release(std::size_t i) {
  if (kept_whole_[i]) return;
  if (shape_only()) return void(shape_only_gathered_[i] = Tensor());
  full_.tensors()[i].release();
  if (full_.copying() && full_.copy_of(i).defined()) full_.copy_of(i).release();
}

void ParamShards::reduce_scatter(std::size_t i) {
  const Tensor& t = full_.tensors()[i];
  const Tensor g = t.grad();
  if (!g.defined()) return;  // frozen, or already reduced
  if (shape_only()) {  // the whole gradient goes; the shard's sum has no values to add
    t.slot()->grad.reset();
    count_modelled_exchange(i, sizeof(float));
    return;
  }
  const int N = comm::size(kGroup);
  const std::int64_t s = shard_size_[i];
  std::vector<float> parts = g.to_host_f32(), received(std::size_t(s) * std::size_t(N));
  parts.resize(std::size_t(s) * std::size_t(N), 0.0f);
  comm::all_to_all(parts.data(), s, received.data(), kGroup);
  t.slot()->grad.reset();  // the full gradient goes
  // sum = part 0 + part 1 + ... (first micro-batch), or sum + part 0 + ...:
  // the additions, in the order, of the unsharded data-parallel reduction.
  const Tensor& shard = shards_[i];
  std::vector<float> sum = first_micro_batch_ ? std::vector<float>(received.begin(), received.begin() + s)
                                              : shard.slot()->grad->to_host_f32();
  for (int r = first_micro_batch_ ? 1 : 0; r < N; ++r)
    for (std::int64_t j = 0; j < s; ++j) sum[std::size_t(j)] += received[std::size_t(r * s + j)];
  upload(sum, *shard.slot()->grad);
}

const std::vector<std::size_t>& ParamShards::members(const std::string& block) {
  auto it = members_.find(block);
  if (it == members_.end()) {
    std::vector<std::size_t> m;
    for (std::size_t i = 0; i < owner_.size(); ++i)
      if (seen_[i] && owner_[i] == block) m.push_back(i);
    it = members_.emplace(block, std::move(m)).first;
  }
  return it->second;
}

// Also after a recomputation in backward, as FSDP reshards after the
// recomputing forward and unshards before backward: the block whose backward
// asked for it (its node is running and reads its weights next) gathers
// again at once; the other blocks of a segment recomputed with it when their
// backward reaches them (backward_enter comes before each node), so a
// segment holds one block's parameters at a time. That gather is the extra
// communication checkpointing costs under sharding.
void ParamShards::body_done(const std::string& block) {
  for (std::size_t i : members(block)) release(i);
  if (block == in_backward_of_)
    for (std::size_t i : members(block)) gather(i);
}

void ParamShards::backward_enter(const std::string& block) {
  in_backward_of_ = block;
  backward_ran_.insert(block);
  for (std::size_t i : members(block)) gather(i);
}

void ParamShards::backward_leave(const std::string& block) {
  for (std::size_t i : members(block)) {
    reduce_scatter(i);
    release(i);
  }
}

void ParamShards::backward_end() {
  in_backward_of_.clear();
  for (std::size_t i = 0; i < owner_.size(); ++i) {
    reduce_scatter(i);
    release(i);
  }
}

void ParamShards::weight_gradients_done() {
  for (std::size_t i = 0; i < owner_.size(); ++i) reduce_scatter(i);  // (nothing is gathered for W)
}

std::vector<float> ParamShards::shard_of(std::size_t i, const std::vector<float>& values) const {
  const std::int64_t s = shard_size_[i], n = std::int64_t(values.size()), first = std::int64_t(rank_) * s;
  std::vector<float> mine(std::size_t(s), 0.0f);
  for (std::int64_t j = 0; j < s && first + j < n; ++j) mine[std::size_t(j)] = values[std::size_t(first + j)];
  return mine;
}

Tensor ParamShards::unshard(std::size_t i, const Tensor& shard) const {
  const std::int64_t s = shard_size_[i];
  const std::vector<float> mine = shard.to_host_f32();
  std::vector<float> all(std::size_t(s) * std::size_t(comm::size(kGroup)));
  comm::gather_all(mine.data(), s, all.data(), kGroup);
  const Tensor& whole = full_.tensors()[i];
  all.resize(std::size_t(whole.numel()));
  return Tensor::from_host(all, whole.shape(), "unsharded");
}

void ParamShards::gather_everything() {
  for (std::size_t i = 0; i < shards_.size(); ++i) gather(i);
}

void ParamShards::release_everything() {
  for (std::size_t i = 0; i < shards_.size(); ++i) release(i);
}

std::int64_t ParamShards::predicted_bytes(const std::map<std::string, int>& recomputed) const {
  // A gather of s values per rank: s values (of 4 bytes, or 2 at 16 bits)
  // to and from each other rank; a reduce-scatter: s float32 values.
  const std::int64_t per_value = 2 * std::int64_t(comm::size(kGroup) - 1);
  std::int64_t values = 0, reduced = 0;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const std::int64_t s = shard_size_[i];
    if (!seen_[i]) continue;
    if (owner_[i].empty()) {
      values += s;  // gathered once, kept for the step
    } else {
      // Forward, backward, and each re-run: its body_done gathers again for
      // what comes next (the first re-run finds the values released). A
      // block whose backward does not run (frozen, below every trainable
      // parameter) is neither gathered for it nor re-run.
      const auto it = recomputed.find(owner_[i]);
      values += s * (backward_ran_.count(owner_[i]) ? 2 + (it != recomputed.end() ? it->second : 0) : 1);
    }
    if (full_.trainable(i)) reduced += s;
  }
  return per_value * (gathered_value_bytes_ * values + 4 * reduced) +
         2 * 8 * std::int64_t(comm::size(kGroup) - 1);  // and the loss, gathered
}

std::int64_t ParamShards::norm_slots() const {
  std::int64_t slots = 0;
  for (std::size_t i = 0; i < shards_.size(); ++i)
    if (full_.trainable(i)) slots += shard_size_[i] / kNormChunk;
  return slots;
}

// Each rank's shard of a parameter is whole chunks of the norm's summation:
// the ranks exchange their chunks' sums of squares, and every rank adds them
// as gradient_norm adds the unsharded gradient's.
double ParamShards::gradient_norm() const {
  double total = 0;
  for (double s : gradient_squares()) total += s;
  return std::sqrt(total);
}

std::vector<double> ParamShards::gradient_squares() const {
  const int r = comm::rank(kGroup);
  const std::int64_t slots = norm_slots();
  std::vector<double> mine(std::size_t(slots), 0.0), all(std::size_t(slots) * std::size_t(comm::size(kGroup)));
  std::int64_t at = 0;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (!full_.trainable(i)) continue;
    const std::int64_t s = shard_size_[i], n = full_.tensors()[i].numel();
    const std::int64_t held = std::max<std::int64_t>(0, std::min(s, n - r * s));  // the rest is padding
    const std::vector<double> sums = chunk_squares(shards_[i].grad(), held);  // a trainable shard has one
    std::copy(sums.begin(), sums.end(), mine.begin() + at);
    at += s / kNormChunk;
  }
  comm::gather_all(mine.data(), slots, all.data(), kGroup);
  std::vector<double> squares(shards_.size(), 0.0);
  at = 0;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (!full_.trainable(i)) continue;
    const std::int64_t per_rank = shard_size_[i] / kNormChunk;
    const std::int64_t chunks = (full_.tensors()[i].numel() + kNormChunk - 1) / kNormChunk;
    for (std::int64_t c = 0; c < chunks; ++c) squares[i] += all[std::size_t((c / per_rank) * slots + at + c % per_rank)];
    at += per_rank;
  }
  return squares;
}

std::int64_t ParamShards::norm_bytes() const { return 2 * 8 * std::int64_t(comm::size(kGroup) - 1) * norm_slots(); }

std::int64_t ParamShards::kept_whole_bytes() const {
  std::int64_t b = 0;
  for (std::size_t i = 0; i < kept_whole_.size(); ++i)
    if (kept_whole_[i]) b += std::int64_t(MemoryTracker::counted_bytes(full_.tensors()[i].nbytes()));
  return b;
}

std::int64_t ParamShards::shard_bytes() const {
  std::int64_t b = 0;
  for (const auto& s : shards_) b += std::int64_t(s.nbytes());
  return b;
}

std::int64_t ParamShards::gradient_bytes() const {
  std::int64_t b = 0;
  for (const auto& s : shards_)
    if (s.slot() && s.slot()->grad) b += std::int64_t(s.slot()->grad->nbytes());
  return b;
}

}  // namespace remat
