// selective:<kinds>: inside every block, a saved tensor whose producing op is
// of a listed kind is dropped and recomputed in backward from what its
// producer saved anyway (the op's recipe), so only those ops run again, once
// each; everything else is kept. Bare `selective` drops everything but GEMM
// outputs (default_selective_kinds); Megatron-LM's selective recomputation is
// selective:attn-core. The last block is kept: its backward comes at once.
#include "strategies/builtin.hpp"
#include "strategies/recompute_region.hpp"

namespace remat {
namespace {

class RecipePacked final : public Packed {
 public:
  RecipePacked(std::shared_ptr<const Tensor::Recipe> recipe, const Tensor& t, std::string where)
      : recipe_(std::move(recipe)), shape_(t.shape()), dtype_(t.dtype()), where_(std::move(where)) {}
  Tensor unpack() override {
    if (!value_.defined()) {
      value_ = run_recipe(*recipe_);
      if (value_.shape() != shape_ || value_.dtype() != dtype_)
        throw RecomputeMismatch(where_ + ": recomputed " + to_string(value_.shape()) + " " + dtype_name(value_.dtype()) +
                                ", forward saved " + to_string(shape_) + " " + dtype_name(dtype_));
    }
    return value_;
  }

 private:
  std::shared_ptr<const Tensor::Recipe> recipe_;
  Shape shape_;
  DType dtype_;
  std::string where_;
  Tensor value_;
};

class SelectiveHooks final : public SavedTensorHooks {
 public:
  SelectiveHooks(const std::set<OpKind>& drop, Storage& keep, RegionTrace* trace, std::string region)
      : drop_(drop), keep_(keep), trace_(trace), region_(std::move(region)) {}
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    if (!drop_.count(t.kind()) || !t.recipe()) return keep_.pack(t);
    if (trace_) {
      trace_->saved += std::int64_t(t.nbytes());
      trace_->dropped += std::int64_t(t.nbytes());
      trace_->saves.push_back(std::string(current_op()) + ": recompute " + op_kind_name(t.kind()) + " " +
                              to_string(t.shape()) + " " + human_bytes(double(t.nbytes())));
    }
    return std::make_shared<RecipePacked>(t.recipe(), t, "region " + region_ + ", " + op_kind_name(t.kind()) +
                                                             " saved by " + current_op());
  }

 private:
  const std::set<OpKind>& drop_;
  Storage& keep_;
  RegionTrace* trace_;
  std::string region_;
};

class Selective final : public Strategy {
 public:
  Selective(std::string spec, std::set<OpKind> drop, bool offload)
      : Strategy(std::move(spec), offload), drop_(std::move(drop)) {}

  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override {
    if (info.index == info.count - 1) return run_stored(device_, info, inputs, body);
    RegionTrace* trace = trace_region(info.name);
    storage().begin_group(info.name, trace);
    Tensors out = run_traced(trace, [&] {
      SelectiveHooks hooks(drop_, storage(), trace, info.name);
      SavedTensorHooksScope scope(hooks);
      return body(inputs);
    });
    storage().end_group();
    return out;
  }

  // Device, at each moment: what the blocks before kept (in the pool with
  // +offload, where only the previous block's is prefetched in backward)
  // and the block's own peak, less what it drops while its forward runs;
  // the head at the end of forward.
  MemoryPrediction predict(const SaveProfile& p) const override {
    const auto& b = p.blocks;
    const bool pool = storage_ != nullptr;
    MemoryPrediction m;
    std::int64_t kept_before = 0, previous = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      const bool last = i + 1 == b.size();
      std::int64_t dropped = 0;
      for (OpKind k : drop_) {
        const auto it = b[i].recomputable.find(k);
        if (!last && it != b[i].recomputable.end()) dropped += it->second;
      }
      const std::int64_t before_fwd = pool ? 0 : kept_before, before_bwd = pool ? previous : kept_before;
      m.device = std::max({m.device, before_fwd + b[i].forward_peak - dropped, before_bwd + b[i].backward_peak});
      if (last) {
        m.device = std::max(m.device, before_fwd + b[i].saved + p.outside_peak);
      } else {
        kept_before += b[i].saved - dropped;
        previous = b[i].saved - dropped;
      }
    }
    if (pool) m.offload = kept_before;
    return m;
  }

 private:
  std::set<OpKind> drop_;
};

}  // namespace

std::unique_ptr<Strategy> make_selective(const std::string& spec, std::set<OpKind> drop, bool offload) {
  return std::make_unique<Selective>(spec, std::move(drop), offload);
}

}  // namespace remat
