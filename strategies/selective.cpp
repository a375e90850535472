// selective:<kinds>: inside every block, a saved tensor whose producing op is
// of a listed kind is dropped and recomputed in backward from what its
// producer saved anyway (the op's recipe), so only those ops run again, once
// each; everything else is kept. Megatron-LM's selective recomputation is
// selective:attn-core. The last block is kept: its backward comes at once.
#include "autodiff/stats.hpp"
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

  // Peak: the end of forward, with every block but the last without its
  // dropped tensors (in the pool with +offload).
  MemoryPrediction predict(const SaveProfile& p) const override {
    MemoryPrediction m{p.outside + p.blocks.back().saved, 0};
    for (std::size_t i = 0; i + 1 < p.blocks.size(); ++i) {
      std::int64_t kept = p.blocks[i].saved;
      for (OpKind k : drop_) {
        const auto it = p.blocks[i].recomputable.find(k);
        if (it != p.blocks[i].recomputable.end()) kept -= it->second;
      }
      (storage_ ? m.offload : m.device) += kept;
    }
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
