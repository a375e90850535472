#pragma once
// Whole training runs compared: the same model, data and optimizer trained
// under `full` and under each strategy; an exact strategy must give the same
// loss at every step and the same final weights, bit for bit.
#include <string>
#include <vector>

#include "train/trainer.hpp"

namespace remat {

struct TrajectoryComparison {
  std::string strategy;
  bool exact = true;
  int first_divergence = 0;  // 1-based step whose loss first differs (0: none)
  double max_loss_diff = 0;  // over all steps, absolute
  double weights_max_rel = 0;  // worst per-parameter max |w - w_full| / max |w_full|
  bool bitwise = true;       // every loss and every final weight identical
};

// Trains `base` (its strategy ignored) under full and under each of
// `strategies`, from the same initialisation.
std::vector<TrajectoryComparison> compare_trajectories(const TrainConfig& base,
                                                       const std::vector<std::string>& strategies);

}  // namespace remat
