#include "strategies/profile.hpp"

namespace remat {
namespace {

class BlockProbe final : public SavedTensorHooks {
 public:
  explicit BlockProbe(BlockSaves& b) : block_(b) {}
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    if (seen_.insert(t.raw()).second) {
      block_.saved += std::int64_t(t.nbytes());
      if (t.recipe()) block_.recomputable[t.kind()] += std::int64_t(t.nbytes());
    }
    return keep_.pack(t);
  }

 private:
  BlockSaves& block_;
  std::set<const void*> seen_;
  KeepHooks keep_;
};

}  // namespace

Tensors SaveProfiler::run(const BlockInfo&, const Tensors& inputs, const BlockBody& body) {
  BlockSaves& b = profile_.blocks.emplace_back();
  for (const auto& x : inputs) b.input += std::int64_t(x.nbytes());
  BlockProbe probe(b);
  SavedTensorHooksScope scope(probe);
  return body(inputs);
}

std::shared_ptr<Packed> SaveProfiler::pack(const Tensor& t) {
  if (seen_.insert(t.raw()).second) profile_.outside += std::int64_t(t.nbytes());
  return keep_.pack(t);
}

}  // namespace remat
