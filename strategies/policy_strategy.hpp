#pragma once
// The engine that runs any Policy (strategies/policy.hpp): blocks in a
// checkpoint segment run as one recompute region (strategies/
// recompute_region.hpp) that keeps only the segment's inputs; every other
// block runs plainly, each tensor it saves routed by the policy's decision
// to the device, the offload pool (strategies/storage.hpp), or a recipe to
// run again in backward. Its memory prediction follows the same decisions
// over a probe step's profile, so a new policy needs no prediction code.
#include <memory>

#include "strategies/policy.hpp"
#include "strategies/recompute_region.hpp"
#include "strategies/storage.hpp"
#include "strategies/strategy.hpp"

namespace remat {

class PolicyStrategy : public Strategy {
 public:
  PolicyStrategy(std::string spec, Policy policy);
  ~PolicyStrategy() override;
  Tensors run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) override;
  MemoryPrediction predict(const SaveProfile& p) const override;
  int reruns(const BlockInfo& block) const override;
  void forward_over() override;

  class Router;

 protected:
  // A planned strategy sets its policy once it has planned.
  void set_policy(Policy policy) { policy_ = std::move(policy); }

 private:
  void reset() override;
  Tensors run_block(const BlockInfo& info, const Tensors& inputs, const BlockBody& body);
  Policy policy_;
  std::unique_ptr<Router> router_;
  std::shared_ptr<RecomputeRegion> region_;
};

// The peak a policy keeps for a model that saves `p`: the decisions applied
// to each saved tensor of the probe, moment by moment through the step.
MemoryPrediction predict_policy(const SaveProfile& p, const Policy& policy);

}  // namespace remat
