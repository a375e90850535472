// offload: every tensor a block saves moves to the host offload pool when
// the block's forward ends and comes back, with the previous block's, when
// its backward starts (strategies/storage.hpp). The last block stays: its
// backward comes right away. As a part of a composition ("every:2+offload",
// "selective+offload") it moves what the others keep but do not insist on:
// checkpoint segment inputs, the tensors selective does not recompute.
// offload-checkpoint is per-layer+offload.
#include "strategies/registry.hpp"

namespace remat {

Policy per_layer_policy();  // strategies/checkpoint.cpp

namespace {

Policy offload_policy() {
  Policy p;
  p.decide = [](const SavedTensorInfo& t) {
    return t.block.index == t.block.count - 1 ? Decision::none : Decision::offload;
  };
  return p;
}

}  // namespace

void register_offload(StrategyRegistry& r) {
  StrategyEntry e;
  e.name = e.usage = "offload";
  e.description = "move every tensor a block saves to the host offload pool; fetch it back for backward; composes "
                  "(S+offload) with what another strategy stores";
  e.policy = [](const std::string&) { return offload_policy(); };
  e.in_all = {"offload"};
  r.add(std::move(e));

  StrategyEntry c;
  c.name = c.usage = "offload-checkpoint";
  c.description = "per-layer+offload: per-layer checkpointing with the block inputs in the offload pool";
  c.policy = [](const std::string&) {
    auto per_layer = per_layer_policy(), offload = offload_policy();
    per_layer.name = "per-layer";
    offload.name = "offload";
    return compose({per_layer, offload}, "offload-checkpoint");
  };
  c.in_all = {"offload-checkpoint"};
  r.add(std::move(c));
}

}  // namespace remat
