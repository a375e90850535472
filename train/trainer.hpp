#pragma once
// Training: the measured step (step/step.hpp) in a loop with an
// optimizer, a learning-rate schedule, gradient clipping and accumulation,
// validation on held-out data, and saves from which a run resumes
// bitwise. Every random draw is a function of (seed, micro-step) and every
// reduction has a fixed order, so the loss sequence and the final weights
// are the same under every exact strategy and across interruptions.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "weights/weights_file.hpp"
#include "finetune/freeze.hpp"
#include "finetune/lora.hpp"
#include "finetune/quantize.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/stage_runner.hpp"
#include "step/step.hpp"
#include "train/loss_scaler.hpp"
#include "train/reduction.hpp"

namespace remat {

struct TrainConfig {
  ModelSetup setup;  // model, preset, sizes (dropout included)
  std::string strategy = "full";
  RunSettings run;  // seed, attention kernel, precision
  double loss_scale = kInitialLossScale;  // fp16: the dynamic loss scale's first value (a power of two)
  std::string data = "random";
  std::string init;  // start from these weights (a weight file, run file or Hugging Face model folder; "": initialised from the seed)
  int steps = 100;
  OptimizerConfig optimizer;
  Schedule schedule;  // its `steps` is this config's
  double grad_clip = 0;  // global-norm clipping threshold; 0: none
  int accumulate = 1;    // micro-batches of B per step
  int eval_every = 0;    // steps between validation losses; 0: none
  int eval_batches = 4;  // held-out batches per validation loss
  int save_every = 0;    // steps between saves (and one at the end); needs `out`
  std::string out;       // the run file; "" for none
  FreezeOptions freeze;  // fine-tuning: parameters that do not train
  LoraOptions lora;      // fine-tuning: low-rank adapters on a frozen base
  QuantFormat quantize = QuantFormat::none;  // QLoRA: the frozen linear weights' format (finetune/quantize.hpp)
  int ranks = 1;         // MPI ranks training data-parallel (comm::size() when run)
  bool shard_params = false;  // ZeRO-3: each rank keeps 1/N of the parameters (train/param_shards.hpp)
  // Pipeline parallelism (pipeline/): the job's model-parallel groups are
  // pipelines of `pipe.stages` ranks running the `accumulate` micro-batches
  // through their stages (pipe.micro_batches is not read: `accumulate` is M).
  pipeline::PipelineSettings pipe;
};

struct StepRecord {
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
  // The model's parts of the loss (mixtral: ce, aux), means over the step's
  // micro-batches like `loss`; and its statistics (mixtral: expert_load,
  // tokens per expert per layer), sums over them.
  std::vector<std::pair<std::string, double>> loss_parts;
  std::vector<Statistic> stats;
  std::int64_t activation_peak = 0;
  std::int64_t comm_bytes = 0;  // sent + received by this rank (data parallel)
  double comm_seconds = 0;      // spent in those exchanges
  std::int64_t predicted_comm_bytes = 0;  // what the schedule says comm_bytes must be
  double loss_scale = 1;  // the step's loss scale (fp16: the scaler's; 1 otherwise)
  bool skipped = false;   // fp16: the gradients overflowed, so the update was not applied
};

struct EvalRecord {
  int step = 0;  // after this many steps
  double loss = 0;
};

struct TrainState {
  int step = 0;  // steps done
  std::vector<StepRecord> history;
  std::vector<EvalRecord> evals;
  std::uint64_t data_position = 0;  // training batches read
  RankMemory memory;  // at the last step
  LossScaler scaler;  // fp16's dynamic loss scale, for the next step
  // Under --pp: the last step's passes on each stage of this rank's
  // pipeline, each in its stage's order (a record, not resumed).
  std::vector<std::vector<pipeline::PassTiming>> pipeline_passes;
};

struct TrainResult {
  TrainState state;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamStore> params;
};

struct TrainProgress {
  // Once the trainer is made: batches in one pass over the data (0: a
  // generated source that never repeats).
  std::function<void(const TrainConfig&, std::uint64_t epoch_batches)> started;
  std::function<void(const TrainConfig&, const TrainState&)> step;   // after each step
  std::function<void(const TrainConfig&, const TrainState&)> saved;  // after each save
};

// A run file read back: its configuration, state, weights and optimizer.
struct SavedRun;
class BatchSource;
class Optimizer;
class Strategy;

// A training run, one step at a time.
class Trainer {
 public:
  // From scratch, or from `resume` (a run file of the same configuration).
  // UserError for a bad configuration.
  explicit Trainer(const TrainConfig& config, const SavedRun* resume = nullptr);
  ~Trainer();
  bool done() const { return state_.step >= config_.steps; }
  // One optimizer step: the micro-batches, clipping, the update, and the
  // validation loss and save when they are due. UserError for a
  // non-finite loss or gradient (naming the step and the first non-finite
  // gradient; the last save stays as it was), or a write that fails.
  // At fp16 a non-finite gradient under a finite loss is an overflow of the
  // loss scale instead: the update is skipped and the scale halved; after
  // kMaxSkippedInARow such steps in a row the run stops (UserError).
  const StepRecord& step();
  static constexpr int kMaxSkippedInARow = 50;
  // Whether the last step saved the run.
  bool saved() const { return saved_; }
  const TrainConfig& config() const { return config_; }
  const TrainState& state() const { return state_; }
  std::uint64_t epoch_batches() const;  // of the training data (0: never repeats)
  TrainResult finish();  // hands over the model, the weights and the state (gathered if sharded)
  // What this rank holds besides activations.
  RankMemory rank_memory() const;

 private:
  TrainConfig config_;
  TrainState state_;
  std::unique_ptr<Model> model_, eval_model_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<BatchSource> data_, held_out_;
  std::unique_ptr<GradientReduction> reduction_;  // how micro-batches and ranks combine
  struct Pipeline;  // under --pp: the schedule, the layers' layout and the link to the neighbouring stages
  std::unique_ptr<Pipeline> pipeline_;
  Schedule schedule_;
  void save();  // the run file (gathered whole first, if sharded)
  StepRecord forward_backward_all(double loss_scale);
  StepRecord forward_backward_pipelined(double loss_scale);
  void restore_optimizer(const SavedRun& resume);
  void stop_if_every_step_overflows() const;
  std::string run_file_kept() const;  // ", out.h5 keeps the last save", for a message that stops the run
  bool saved_ = false;
};

// Trains config.steps steps (Trainer, step after step).
TrainResult train(const TrainConfig& config, const TrainProgress& progress = {}, const SavedRun* resume = nullptr);

}  // namespace remat
