// remat train: training under any strategy, recorded and resumable.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "autodiff/runtime.hpp"
#include "comm/comm.hpp"
#include "datasets/batch_source.hpp"
#include "core/text.hpp"
#include "core/error.hpp"
#include "finetune/adapters_file.hpp"
#include "harness/check.hpp"
#include "harness/cli/commands.hpp"
#include "harness/long_run.hpp"
#include "harness/cli/format.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/tensor_layout.hpp"
#include "harness/cli/validators.hpp"
#include "harness/io/output_guard.hpp"
#include "train/run_file.hpp"

namespace remat::cli {
namespace {

struct TrainOptions {
  ModelOptions model;
  TrainConfig config;
  std::string strategy = "full";
  double dropout = 0;
  std::string adapters_out;  // --lora: the adapters alone, at the end
  bool resume = false, force = false;
};

// "step 120/300  loss 2.3456  val 2.4012  lr 8.1e-04  5210 tok/s  ETA 1m10s"
// (fp16 adds "  scale 65536", and "  skipped (overflow)" on a skipped step)
std::string progress_line(const TrainConfig& c, const TrainState& s, double since_start, int first_step) {
  const StepRecord& r = s.history.back();
  const double tokens = double(c.setup.sizes.B) * c.setup.sizes.S * c.accumulate * c.ranks;
  const int done_here = s.step - first_step;
  const double per_step = since_start / std::max(1, done_here);
  char buf[200];
  std::snprintf(buf, sizeof buf, "step %d/%d  loss %.4f%s  lr %.2e  %.0f tok/s  ETA %s", s.step, c.steps, r.loss,
                s.evals.empty() ? "" : ("  val " + fixed(s.evals.back().loss, 4)).c_str(), r.lr,
                tokens / r.seconds, duration(per_step * (c.steps - s.step)).c_str());
  std::string line = buf;
  if (c.run.precision == Precision::fp16) {
    std::snprintf(buf, sizeof buf, "  scale %g%s", r.loss_scale, r.skipped ? "  skipped (overflow)" : "");
    line += buf;
  }
  return line;
}

// The header's data line. The default batch source has nothing in it to
// learn: a flat loss curve is then the right answer, and it says so before
// anyone waits for one.
void say_data_source(const std::string& data, std::int64_t vocabulary) {
  if (data == "random")
    std::printf("data: random tokens, uniform over the vocabulary: nothing to learn, the loss stays near ln V = %.2f "
                "(--data copy, reverse or text:FILE can be learned)\n",
                std::log(double(vocabulary)));
  else
    std::printf("data: %s\n", data.c_str());
}

// The options as a training configuration, checked; returns the memory the
// step needs (the weights, gradients, optimizer state, the sum of
// accumulated micro-batches, and the step's activations).
std::int64_t configure(TrainOptions& o) {
  TrainConfig& c = o.config;
  c.setup = o.model.resolve();
  c.setup.sizes.dropout = o.dropout;
  validate(c.setup.sizes);
  c.run = o.model.run;
  c.data = o.model.data;
  c.init = o.model.weights;
  c.ranks = comm::size();
  // Each model's group of ranks (tensor, expert or context parallel), or each pipeline, one replica.
  if (c.pipe.split() ? apply_pipeline_layout(c.pipe.stages, o.model.layout().any())
                     : apply_split(o.model.layout(), c.setup, /*data_parallel=*/true))
    c.ranks = comm::size(comm::Group::data);
  const auto specs = strategies_for(c.setup.model, o.strategy, c.run.attention);
  if (specs.size() != 1) throw UserError("remat train runs one strategy; '" + o.strategy + "' names " + std::to_string(specs.size()));
  c.strategy = specs[0];
  // Weights, gradients, the optimizer's state (two for AdamW), the sum of
  // accumulated micro-batches, and the step's activations.
  return require_step_memory(c.setup, c.run.attention, specs, 4 + (c.accumulate > 1 ? 1 : 0), o.force);

}

// Checks the outputs before anything runs; with --resume, the run to
// continue (null: start afresh). `complete`: the run has nothing left to do.
std::unique_ptr<SavedRun> open_outputs(const TrainOptions& o, bool& complete) {
  const TrainConfig& c = o.config;
  if (!o.adapters_out.empty()) {
    if (!c.lora.any()) throw UserError("--adapters-out needs --lora (there are no adapters to write)");
    if (o.adapters_out == c.out) throw UserError("--adapters-out and --out name the same file");
    check_output(o.adapters_out, FileKind::adapters, {batch_source_file(c.data)}, o.force);
  }
  std::unique_ptr<SavedRun> resume;
  if (!c.out.empty()) {
    const FileKind kind = file_kind(c.out);
    if (o.resume && kind == FileKind::training_run) {
      resume = std::make_unique<SavedRun>(read_run_file(c.out));
      require_same_run(c.out, resume->config, c);
      if (resume->state.step >= c.steps) {
        if (comm::rank() == 0) std::printf("%s is complete: %d of %d steps\n", c.out.c_str(), resume->state.step, c.steps);
        complete = true;
      }
      if (comm::rank() == 0) std::printf("resuming %s at step %d of %d\n", c.out.c_str(), resume->state.step, c.steps);
    } else if (kind == FileKind::training_run && !o.force) {
      // Suggest --resume only where it would work: the same run's settings.
      const std::string difference = run_difference(read_run_file(c.out).config, c);
      if (!difference.empty())
        throw UserError(c.out + ": holds another training run (it " + difference +
                        "); pass --force to start over, or give another --out");
      throw UserError(c.out + ": holds a training run already; pass --resume to continue it, --force to start over, "
                      "or give another --out");
    } else {
      check_output(c.out, FileKind::training_run, {batch_source_file(c.data)}, o.force);
      if (o.resume && comm::rank() == 0) std::printf("nothing saved in %s yet: starting at step 0\n", c.out.c_str());
    }
  }
  return resume;
}

// " x 2 ranks", " x 2 ranks, each tensor-parallel 2 with sequence parallelism", ", a pipeline of 2
// stages (1f1b)", or nothing.
std::string layout_text(const TrainConfig& c) {
  const RankGroup& tp = c.setup.sizes.tp;
  std::string s = c.ranks > 1 ? " x " + std::to_string(c.ranks) + " ranks" : "";
  if (tp.split())
    s += std::string(c.ranks > 1 ? ", each" : ",") + " tensor-parallel " + std::to_string(tp.size) +
         (tp.sequence ? " with sequence parallelism" : "");
  if (c.setup.sizes.ep.split())
    s += std::string(c.ranks > 1 ? ", each" : ",") + " expert-parallel " + std::to_string(c.setup.sizes.ep.size);
  if (c.setup.sizes.cp.split())
    s += std::string(c.ranks > 1 ? ", each" : ",") + " context-parallel " + std::to_string(c.setup.sizes.cp.size);
  if (c.pipe.split())
    s += std::string(c.ranks > 1 ? ", each" : ",") + " a pipeline of " + std::to_string(c.pipe.stages) + " stages (" +
         c.pipe.schedule + (c.pipe.stage_layers.empty() ? "" : ", layers " + c.pipe.stage_layers) + ")";
  return s;
}

void print_header(const TrainConfig& c) {
  const Sizes& z = c.setup.sizes;
  std::printf("remat train: %s %s (L %d, D %d, S %d, B %d x %d%s), %s, %s attention, %s, %s %s lr %g, %d steps, %s\n",
              c.setup.model.c_str(), c.setup.preset.c_str(), z.L, z.D, z.S, z.B, c.accumulate,
              layout_text(c).c_str(),
              c.strategy.c_str(),
              ops::attention_kernel_name(c.run.attention), precision_name(c.run.precision), c.optimizer.kind.c_str(),
              c.schedule.kind.c_str(), c.schedule.lr, c.steps, Runtime::describe().c_str());
  print_precision_path(c.run.precision);
  say_data_source(c.data, z.V);
}

// What rank 0 says as the run goes: a progress line per step (a line every
// twentieth of the run when stderr is not a terminal), and how often a
// finite source is read.
TrainProgress progress_reporting(int first) {
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  TrainProgress progress;
  // A finite source read more than once says so: its loss curve dips as the
  // model meets the same text again (the trainer's own source tells).
  progress.started = [=](const TrainConfig& cfg, std::uint64_t epoch) {
    const std::uint64_t reads = std::uint64_t(cfg.steps) * std::uint64_t(cfg.accumulate) * std::uint64_t(cfg.ranks);
    if (epoch > 0 && reads > epoch)
      std::printf("%s: one pass is %llu batches, so this run reads it %.1f times (every pass starts at another "
                  "position, so its windows differ from the last pass's)\n",
                  cfg.data.c_str(), (unsigned long long)epoch, double(reads) / double(epoch));
    std::fflush(stdout);
  };
  progress.step = [=](const TrainConfig& cfg, const TrainState& s) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Said once the run has passed every check and has begun, so that an
    // error stays the only line it prints.
    if (s.step == first + 1 && cfg.out.empty())
      std::fprintf(stderr, "remat train: no --out: the trained weights will not be kept (give --out FILE to keep "
                           "them, save and resume)\n");
    const std::string line = progress_line(cfg, s, elapsed, first);
    const int every = std::max(1, cfg.steps / 20);
    if (tty) std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else if (s.step % every == 0 || s.step == cfg.steps) std::fprintf(stderr, "%s\n", line.c_str());
  };
  return progress;
}

void print_summary(const TrainOptions& o, const TrainResult& result, int first) {
  const TrainConfig& c = o.config;
  const TrainState& s = result.state;
  std::vector<double> times;
  for (std::size_t i = std::size_t(first); i < s.history.size(); ++i) times.push_back(s.history[i].seconds);
  std::printf("done: %d steps, final loss %.4f", s.step, s.history.back().loss);
  if (!s.evals.empty()) std::printf(", validation loss %.4f", s.evals.back().loss);
  std::printf(", median step %.3f s\n", median(times));
  if (c.run.precision == Precision::fp16) {
    int skipped = 0;
    for (const auto& r : s.history) skipped += r.skipped ? 1 : 0;
    std::printf("fp16 loss scale: %g now, %d of %d steps skipped on overflow\n", s.scaler.scale, skipped, s.step);
  }
  if (comm::size() > 1) {
    const StepRecord& last = s.history.back();
    std::printf("communication per step and rank: %.2f MiB (predicted %.2f MiB), %.3f s\n", mib(last.comm_bytes),
                mib(last.predicted_comm_bytes), last.comm_seconds);
  }
  if (c.shard_params) {
    const RankMemory& m = s.memory;
    std::printf("per rank (rank 0): parameter shards %.2f MiB, gradient shards %.2f MiB, optimizer state %.2f MiB, "
                "gathered parameters at most %.2f MiB, whole gradients awaiting reduction at most %.2f MiB, "
                "activations %.2f MiB\n",
                mib(m.parameters), mib(m.gradients), mib(m.optimizer), mib(m.gathered_peak), mib(m.reducing_peak),
                mib(s.history.back().activation_peak));
  }
  if (!c.out.empty())
    std::printf("wrote %s (record, weights%s, optimizer state)\n", c.out.c_str(), c.lora.any() ? " and adapters" : "");
  if (!o.adapters_out.empty()) {
    write_adapters(o.adapters_out, c.setup, *result.params, c.lora);
    std::printf("wrote %s (the LoRA adapters alone; fold them into the base with remat lora-merge)\n",
                o.adapters_out.c_str());
  }
}

void run_train(TrainOptions& o) {
  const std::int64_t memory = configure(o);
  const TrainConfig& c = o.config;
  bool complete = false;
  const std::unique_ptr<SavedRun> resume = open_outputs(o, complete);
  if (complete) return;
  const bool speaks = comm::rank() == 0;  // under mpirun, rank 0 reports and writes for all
  if (speaks) print_header(c);
  std::fflush(stdout);
  const int first = resume ? resume->state.step : 0;
  const LongRunNotice notice(c.setup, std::int64_t(c.steps - first) * c.accumulate, memory, speaks);
  const TrainResult result = train(c, speaks ? progress_reporting(first) : TrainProgress{}, resume.get());
  if (!speaks) return;
  if (isatty(fileno(stderr))) std::fprintf(stderr, "\n");
  print_summary(o, result, first);
}

}  // namespace

void setup_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a model under a strategy; record the run and save it so that it resumes");
  o->model.bind_with_weights(*cmd);
  add_tp_options(*cmd, o->model.tp, o->model.sp);
  add_cp_option(*cmd, o->model.cp);
  add_ep_option(*cmd, o->model.ep);
  add_pipeline_options(*cmd, o->config.pipe, /*for_training=*/true);
  add_freeze_options(*cmd, o->config.freeze);
  add_lora_options(*cmd, o->config.lora);
  add_quantize_option(*cmd, o->config.quantize);
  quantized_precision_default(*cmd, o->config.quantize, o->model.run.precision);
  cmd->add_option("--adapters-out", o->adapters_out,
                  "With --lora: also write the trained adapters alone to this file (for remat lora-merge)");
  TrainConfig& c = o->config;
  cmd->add_option("--strategy", o->strategy, "Activation-memory strategy (see `remat strategies`)")->capture_default_str();
  cmd->add_option("--dropout", o->dropout, "Dropout probability")->check(CLI::Range(0.0, 0.99).description("from 0 to 0.99"));
  cmd->add_option("--steps", c.steps, "Optimizer steps")->check(whole_number(1, 100000000))->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer.kind, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  cmd->add_option("--lr", c.schedule.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--warmup", c.schedule.warmup, "Steps of linear warm-up from 0")->check(whole_number(0, 100000000))->capture_default_str();
  cmd->add_option("--schedule", c.schedule.kind, "After warm-up: cosine (decay to 0 at the last step) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  cmd->add_option("--weight-decay", c.optimizer.weight_decay, "Decoupled weight decay (not on biases and norm gains)")
      ->capture_default_str();
  cmd->add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--grad-clip", c.grad_clip, "Clip the global gradient norm to this (0: no clipping)")->capture_default_str();
  cmd->add_option("--loss-scale", c.loss_scale,
                  "fp16: the dynamic loss scale's first value, a power of two (halved and the step skipped on an "
                  "overflow, doubled after 2000 steps without one)")
      ->capture_default_str();
  cmd->add_option("--accumulate", c.accumulate, "Micro-batches of B per step (gradient accumulation)")
      ->check(whole_number(1, 65536))
      ->capture_default_str();
  cmd->add_option("--eval-every", c.eval_every, "Steps between validation losses on held-out data (0: none)")
      ->check(whole_number(0, 100000000));
  cmd->add_option("--eval-batches", c.eval_batches, "Held-out batches per validation loss")
      ->check(whole_number(1, 100000))
      ->capture_default_str();
  cmd->add_option("--out", c.out, "The run file: record, weights and optimizer state (HDF5)");
  cmd->add_option("--save-every", c.save_every, "Steps between saves into --out (it is also written at the end)")
      ->check(whole_number(0, 100000000));
  cmd->add_flag("--shard-params", c.shard_params,
                "Under mpirun: each rank keeps 1/N of every parameter, gradient and optimizer state (ZeRO-3), "
                "gathering a block's parameters for its forward, its recomputation and its backward");
  cmd->add_flag("--resume", o->resume, "Continue the run in --out from its last save (bitwise the same run)");
  cmd->add_flag("--force", o->force, "Start over in an existing --out; skip the memory check");
  cmd->callback([o] { run_train(*o); });
}

namespace {
const RegisterCommand register_train(90, setup_train);
}  // namespace

}  // namespace remat::cli
