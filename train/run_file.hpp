#pragma once
// The training run file (docs/training.md): one HDF5 file that is the run's
// record (configuration, per-step loss, learning rate, gradient norm, step
// time, activation peak, validation losses) and its latest state
// (weights in the docs/models.md layout, so `remat grads --weights` and
// PyTorch read it, optimizer state, step, data position). Written whole and
// replaced atomically at each save: a kill or a full disk leaves the
// previous save.
#include <map>
#include <string>

#include "train/trainer.hpp"

namespace remat {

struct SavedRun {
  TrainConfig config;
  TrainState state;
  LoadedWeights weights;
  std::int64_t optimizer_steps = 0;
  std::map<std::string, std::vector<std::vector<float>>> optimizer_state;  // name -> per parameter
};

constexpr std::int64_t kRunFileVersion = 1;

// An optimizer's state as a run file holds it: per buffer name ("m", "v"),
// one tensor per parameter shaped like it (undefined for a frozen one).
struct OptimizerState {
  std::int64_t steps = 0;
  std::vector<std::pair<std::string, std::vector<Tensor>>> buffers;
};
OptimizerState optimizer_state(Optimizer& optimizer);

void write_run_file(const std::string& path, const TrainConfig& config, const TrainState& state,
                    const ParamStore& params, const OptimizerState& optimizer);
// UserError if `path` is not a run file this remat can read.
SavedRun read_run_file(const std::string& path);

// The first setting in which `run` differs from `asked` ("was trained with
// steps 2, this run asks for 4"), or "" where `asked` would continue it.
std::string run_difference(const TrainConfig& run, const TrainConfig& asked);

// Throws UserError naming the first setting in which `run` (read from
// `path`) differs from `asked`, which would make the resumed run another.
void require_same_run(const std::string& path, const TrainConfig& run, const TrainConfig& asked);

// Only the record (for `remat report`): configuration and history.
SavedRun read_run_record(const std::string& path);

}  // namespace remat
