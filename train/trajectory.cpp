#include "train/trajectory.hpp"

#include <cmath>
#include <cstring>

#include "strategies/registry.hpp"

namespace remat {

std::vector<TrajectoryComparison> compare_trajectories(const TrainConfig& base,
                                                       const std::vector<std::string>& strategies) {
  TrainConfig config = base;
  config.out.clear();
  config.save_every = 0;
  config.strategy = "full";
  const TrainResult full = train(config);
  std::vector<std::vector<double>> full_weights;
  for (const auto& t : full.params->tensors()) full_weights.push_back(t.to_host_f64());

  std::vector<TrajectoryComparison> out;
  for (const auto& spec : strategies) {
    config.strategy = spec;
    const TrainResult r = train(config);
    TrajectoryComparison c;
    c.strategy = spec;
    c.exact = parse_strategy(spec).exact;
    for (std::size_t s = 0; s < r.state.history.size(); ++s) {
      const double a = r.state.history[s].loss, b = full.state.history[s].loss;
      const bool same = std::memcmp(&a, &b, sizeof a) == 0;
      if (!same && !c.first_divergence) c.first_divergence = int(s) + 1;
      c.max_loss_diff = std::max(c.max_loss_diff, std::isfinite(a - b) ? std::abs(a - b) : INFINITY);
      c.bitwise = c.bitwise && same;
    }
    for (std::size_t i = 0; i < full_weights.size(); ++i) {
      const auto w = r.params->tensors()[i].to_host_f64();
      double diff = 0, scale = 0;
      for (std::size_t j = 0; j < w.size(); ++j) {
        diff = std::max(diff, std::abs(w[j] - full_weights[i][j]));
        scale = std::max(scale, std::abs(full_weights[i][j]));
      }
      c.weights_max_rel = std::max(c.weights_max_rel, scale > 0 ? diff / scale : diff);
      c.bitwise = c.bitwise && diff == 0;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace remat
