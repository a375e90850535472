// remat time: training steps of one model under one strategy, in a fresh
// process, the way a training loop runs them: the median step time, the
// tracker's activation peak, and the peak resident set above its level once
// the model and batch exist (the measure of the PyTorch figures it is
// compared with; bench/side_by_side.py runs both, alternating).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "autodiff/runtime.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "harness/check.hpp"
#include "comm/comm.hpp"
#include "harness/cli/commands.hpp"
#include "harness/long_run.hpp"
#include "harness/cli/format.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/cli/validators.hpp"
#include "harness/resident_memory.hpp"
#include "harness/tensor_layout.hpp"
#include "pipeline/pipelined_step.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"

namespace remat::cli {
namespace {

struct TimeOptions {
  ModelOptions model;
  FineTuning finetune;  // --freeze, --lora, --quantize
  std::string strategy = "full";
  int steps = 5, warmup = 1;
  bool json = false, force = false;
  pipeline::PipelineSettings pipe;  // --pp, --micro-batches, --schedule, --stage-layers
};

// What the timed steps measured.
struct Timing {
  std::string strategy;
  std::vector<double> seconds;
  std::int64_t activation_peak = 0, offload_peak = 0;
  double loss = 0;
  std::int64_t parameter_count = 0;
  std::int64_t rss_baseline = 0, rss_peak = 0;  // the peak above the baseline
  bool peak_reset = false;                      // false: the peak is since the process began
  std::vector<std::string> stage_layers;        // --pp / --micro-batches: per stage (rank)
  std::vector<std::int64_t> stage_peaks, stage_offload_peaks;
  int data_groups;  // data-parallel groups beside a split (1: none)
};

Timing time_steps(const TimeOptions& o, const ModelSetup& whole, const std::string& spec, std::int64_t memory) {
  ModelSetup setup = whole;
  auto store = o.model.make_params(setup, o.force);
  // --cp: its rows; --tp, --ep: this rank's parts; each beside data-parallel groups on more ranks
  if (apply_split(o.model.layout(), setup, /*data_parallel=*/true)) take_rank_parts(setup, store);
  const bool say = !o.json && comm::rank() == 0;
  Batch batch = o.model.make_batch(setup.sizes);
  const int groups = take_data_group_rows(setup, batch, "give another --batch, or start fewer ranks");
  const auto model = models().find(setup.model).make(setup.sizes);
  fine_tune(store, *model, batch, o.finetune, o.model.run.seed, setup, o.json);
  ParamStore& params = *store;
  auto strategy = make_strategy(spec);
  {  // a plan is made at the precision it will run at
    PrecisionScope precision(params, o.model.run.precision);
    prepare_strategy(*strategy, *model, params, batch, o.model.run.attention, o.model.run.seed);
  }
  // Gradient buffers are allocated once and kept: part of the model, like
  // its weights, and in the baseline (side_by_side.py does the same in PyTorch).
  params.zero_grad();
  Timing t{spec, {}, 0, 0, 0, params.count(), resident_bytes(), 0, reset_peak_resident(), {}, {}, {}, groups};
  const LongRunNotice notice(setup, o.warmup + o.steps, memory, !o.json);
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    // (At 16 bits, the 16-bit copies are made in every step, as in training.)
    StepResult r = run_step(*model, params, batch, step_options(o.model.run, strategy.get()));
    if (groups > 1) {  // the groups' gradients averaged, as a data-parallel step does: part of its time
      const auto start = std::chrono::steady_clock::now();
      r.loss = average_over_data_groups(params, r.loss);
      r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const bool timed = i >= o.warmup;
    if (timed) {
      t.seconds.push_back(r.seconds);
      t.activation_peak = std::max(t.activation_peak, r.activation_peak);
      t.offload_peak = std::max(t.offload_peak, r.offload_peak);
    }
    t.loss = r.loss;
    if (say)
      std::fprintf(stderr, "%s %d/%d: %.3f s\n", timed ? "step" : "warm-up", timed ? i - o.warmup + 1 : i + 1,
                   timed ? o.steps : o.warmup, r.seconds);
  }
  t.rss_peak = peak_resident_bytes() - t.rss_baseline;
  return t;
}

// --pp / --micro-batches: whole steps of M micro-batches (under --pp every
// stage's passes and the gradients' sum over the stages), each timed on
// rank 0 from its start to the end of that sum, which waits for every stage.
Timing time_pipelined_steps(const TimeOptions& o, const ModelSetup& whole, const std::string& spec, std::int64_t memory) {
  const pipeline::PipelineSettings& pipe = o.pipe;
  ModelSetup setup = whole;
  apply_pipeline_step_layout(setup, pipe);
  auto params = o.model.make_params(setup, o.force);
  const auto model = models().find(setup.model).make(setup.sizes);
  const std::vector<Batch> batches =
      micro_batches_from(o.model.make_batch(setup.sizes), pipe.micro_batches, setup.sizes.V, o.model.run.seed);
  fine_tune(params, *model, batches.front(), o.finetune, o.model.run.seed, setup, o.json);
  auto strategy = make_strategy(spec);
  params->zero_grad();
  Timing t{spec, {}, 0, 0, 0, params->count(), resident_bytes(), 0, reset_peak_resident(), {}, {}, {}, 1};
  const LongRunNotice notice(setup, (o.warmup + o.steps) * pipe.micro_batches, memory, !o.json);
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const pipeline::PipelinedStep r =
        pipeline::pipelined_step(*model, *params, batches, step_options(o.model.run, strategy.get(), std::uint64_t(i)), pipe);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= o.warmup) t.seconds.push_back(seconds);
    t.loss = r.loss;
    t.stage_layers = r.stage_layers, t.stage_peaks = r.stage_peaks, t.stage_offload_peaks = r.offload_peaks;
    t.activation_peak = *std::max_element(r.stage_peaks.begin(), r.stage_peaks.end());
    t.offload_peak = *std::max_element(r.offload_peaks.begin(), r.offload_peaks.end());
    if (!o.json && comm::rank() == 0)
      std::fprintf(stderr, "%s %d/%d: %.3f s\n", i >= o.warmup ? "step" : "warm-up",
                   i >= o.warmup ? i - o.warmup + 1 : i + 1, i >= o.warmup ? o.steps : o.warmup, seconds);
  }
  t.rss_peak = peak_resident_bytes() - t.rss_baseline;
  return t;
}

void print_json(const TimeOptions& o, const ModelSetup& setup, const Timing& t) {
  const double step_median = median(t.seconds), fastest = *std::min_element(t.seconds.begin(), t.seconds.end());
  const nlohmann::json j = {{"model", setup.model},
                            {"preset", setup.preset},
                            {"strategy", t.strategy},
                            {"attention", ops::attention_kernel_name(o.model.run.attention)},
                            {"precision", precision_name(o.model.run.precision)},
                            {"backend", Runtime::describe()},
                            {"steps", o.steps},
                            {"median_s", step_median},
                            {"spread_s", spread_of(t.seconds).half_iqr},
                            {"min_s", fastest},
                            {"loss", t.loss},
                            {"activation_peak_bytes", t.activation_peak},
                            {"offload_peak_bytes", t.offload_peak},
                            {"rss_peak_above_baseline_bytes", t.rss_peak},
                            {"rss_baseline_bytes", t.rss_baseline},
                            {"rss_peak_since_start", !t.peak_reset},
                            {"parameters", t.parameter_count},  // kept for readers of earlier output
                            {"parameter_count", t.parameter_count}};  // the name remat estimate --json uses
  nlohmann::json out = j;
  for (std::size_t s = 0; s < t.stage_peaks.size(); ++s)
    out["stages"].push_back({{"layers", t.stage_layers[s]},
                             {"activation_peak_bytes", t.stage_peaks[s]},
                             {"offload_peak_bytes", t.stage_offload_peaks[s]}});
  if (o.pipe.stepped()) out["micro_batches"] = o.pipe.micro_batches, out["pipeline_stages"] = o.pipe.stages;
  if (t.data_groups > 1) out["data_groups"] = t.data_groups;
  std::printf("%s\n", out.dump().c_str());
}

void print_text(const TimeOptions& o, const ModelSetup& setup, const Timing& t) {
  const double step_median = median(t.seconds), fastest = *std::min_element(t.seconds.begin(), t.seconds.end());
  const Sizes& z = setup.sizes;
  std::printf("%s %s (L %d, D %d, S %d, B %d), %s, %s attention, %s, %s\n", setup.model.c_str(),
              setup.preset.c_str(), z.L, z.D, z.S, z.B, t.strategy.c_str(), ops::attention_kernel_name(o.model.run.attention),
              precision_name(o.model.run.precision), Runtime::describe().c_str());
  print_precision_path(o.model.run.precision);
  if (o.model.tp > 1)
    std::printf("tensor-parallel over %d ranks%s: each rank's figures (rank 0's printed)\n", o.model.tp,
                o.model.sp ? ", with sequence parallelism" : "");
  if (o.model.ep > 1)
    std::printf("expert-parallel over %d ranks: each rank's figures (rank 0's printed)\n", o.model.ep);
  if (o.model.cp > 1)
    std::printf("context-parallel over %d ranks: each rank's figures for its rows (rank 0's printed)\n", o.model.cp);
  if (t.data_groups > 1)
    std::printf("%d data-parallel groups beside it, each on its own %d of the %d sequences; a step includes averaging "
                "their gradients\n", t.data_groups, z.B / t.data_groups, z.B);
  if (o.pipe.stepped())
    std::printf("a step: %d micro-batches %s\n", o.pipe.micro_batches,
                o.pipe.split() ? ("through " + std::to_string(o.pipe.stages) + " pipeline stages, " + o.pipe.schedule).c_str()
                               : "accumulated on one rank");
  std::printf("step time: median %.3f s +- %.3f (half the interquartile range), fastest %.3f s, over %d steps after %d "
              "warm-up\n",
              step_median, spread_of(t.seconds).half_iqr, fastest, o.steps, o.warmup);
  for (std::size_t s = 0; s < t.stage_peaks.size() && o.pipe.split(); ++s)
    std::printf("stage %zu (layers %s): activation peak %.1f MiB, offload pool %.1f MiB\n", s, t.stage_layers[s].c_str(),
                mib(t.stage_peaks[s]), mib(t.stage_offload_peaks[s]));
  std::printf("activation peak (tracker, exact): %.1f MiB%s\n", mib(t.activation_peak),
              t.offload_peak ? (", offload pool " + fixed(mib(t.offload_peak), 1) + " MiB").c_str() : "");
  std::printf("resident set: peak %.1f MiB above the %.1f MiB held once the model (weights and gradient buffers) and "
              "batch existed%s\n",
              mib(t.rss_peak), mib(t.rss_baseline),
              t.peak_reset ? "" : " (peak since process start: the system refused a reset)");
}

void run_time(const TimeOptions& o) {
  const ModelSetup setup = o.model.resolve();
  const auto specs = strategies_for(setup.model, o.strategy, o.model.run.attention);
  if (specs.size() != 1) throw UserError("remat time runs one strategy; '" + o.strategy + "' names " +
                                         std::to_string(specs.size()) + " (use `remat matrix` for several)");
  // Under --tp LoRA and quantized weights split with their weights; under --cp every rank holds the whole model.
  if (o.model.ep > 1 && o.finetune.lora.any()) throw UserError("--ep with --lora: not yet");
  Sizes layout;
  layout.ep.size = o.model.ep;
  refuse_planned_under_experts(layout, specs);
  pipeline::refuse_without_stages(o.pipe);
  if (o.pipe.stepped() && (o.model.tp > 1 || o.model.sp || o.model.ep > 1 || o.model.cp > 1 ||
                        parse_strategy(specs[0]).planned))
    throw UserError("--pp or --micro-batches with --tp, --sp, --ep, --cp or a budget: not yet");
  const std::int64_t memory = require_step_memory(setup, o.model.run.attention, specs, 2, o.force);
  const Timing t = o.pipe.stepped() ? time_pipelined_steps(o, setup, specs[0], memory) : time_steps(o, setup, specs[0], memory);
  if (o.json) print_json(o, setup, t);
  else print_text(o, setup, t);
}

}  // namespace

void setup_time(CLI::App& app) {
  auto o = std::make_shared<TimeOptions>();
  auto* cmd = app.add_subcommand(
      "time", "Time training steps of one model under one strategy; report step time, activation bytes and the "
              "resident set's peak (the measure PyTorch comparisons use)");
  o->model.preset = "small";
  o->model.bind_with_weights(*cmd);
  add_tp_options(*cmd, o->model.tp, o->model.sp);
  add_cp_option(*cmd, o->model.cp);
  add_ep_option(*cmd, o->model.ep);
  add_pipeline_options(*cmd, o->pipe);
  add_fine_tuning_options(*cmd, o->finetune);
  quantized_precision_default(*cmd, o->finetune.quantize, o->model.run.precision);
  cmd->add_option("--strategy", o->strategy, "Activation-memory strategy (see `remat strategies`)")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Timed steps (the median is reported)")
      ->check(whole_number(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed steps first")->check(whole_number(0, 1000000))->capture_default_str();
  cmd->add_flag("--force", o->force, "Run even where the memory estimate says it will not fit");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the table (for scripts)");
  cmd->callback([o] { run_time(*o); });
}

namespace {
const RegisterCommand register_time(80, setup_time);
}  // namespace

}  // namespace remat::cli
