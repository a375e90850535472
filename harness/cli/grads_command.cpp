// remat grads: loss and gradients of one forward/backward on a weight file.
#include <cstdio>
#include <memory>

#include "weights/weights_file.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "harness/check.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/io/output_guard.hpp"
#include "harness/tensor_layout.hpp"
#include "optim/optimizer.hpp"
#include "pipeline/pipelined_step.hpp"
#include "pipeline/stage_runner.hpp"
#include "train/tensor_parts.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"

namespace remat::cli {
namespace {

// The tensors a gradients file holds: the trainable ones (a frozen one has no gradient).
std::size_t trainable_tensors(const ParamStore& params) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < params.names().size(); ++i) n += params.trainable(i) ? 1 : 0;
  return n;
}

struct GradsOptions {
  std::string weights;
  std::string out;
  RunSettings run;  // --seed, --attention, --precision
  std::string strategy = "full";
  std::string data;  // overrides the file's batch
  double router_aux = 0.01;
  int tp = 1, ep = 1, cp = 1;
  bool sp = false;
  FineTuning finetune;  // --freeze, --lora, --quantize: the gradients of what trains
  pipeline::PipelineSettings pipe;  // --pp, --micro-batches, --schedule, --stage-layers
  bool force = false;
};

// The step's micro-batches: --data's next M, or the file's batch (M = 1),
// or M random batches of the file's shape (seeds seed, seed + 1, ...).
std::vector<Batch> micro_batches_of(const GradsOptions& o, const LoadedWeights& w) {
  const Sizes& z = w.setup.sizes;
  const int M = o.pipe.micro_batches;
  std::vector<Batch> out;
  if (!o.data.empty()) {
    const auto source = make_batch_source(o.data, z.B, z.S, z.V, o.run.seed);
    for (int m = 0; m < M; ++m) out.push_back(source->next());
  } else if (w.batch && M == 1) {
    out.push_back(*w.batch);
  } else {
    std::printf("%d random micro-batches [%d, %d] with seeds %llu..%llu\n", M, z.B, z.S,
                static_cast<unsigned long long>(o.run.seed), static_cast<unsigned long long>(o.run.seed + M - 1));
    for (int m = 0; m < M; ++m) out.push_back(random_batch(z.B, z.S, z.V, o.run.seed + std::uint64_t(m)));
  }
  return out;
}

// The one strategy --strategy names.
std::string one_strategy(const GradsOptions& o, const ModelSetup& setup) {
  const auto specs = strategies_for(setup.model, o.strategy, o.run.attention);
  if (specs.size() != 1) throw UserError("remat grads runs one strategy; '" + o.strategy + "' names " + std::to_string(specs.size()));
  return specs[0];
}

// The step's batch: --data's first, else the file's, else a random one.
void choose_batch(const GradsOptions& o, LoadedWeights& w) {
  const Sizes& z = w.setup.sizes;
  if (!o.data.empty()) {
    w.batch = make_batch_source(o.data, z.B, z.S, z.V, o.run.seed)->next();
  } else if (!w.batch) {
    std::printf("%s has no /batch: using a random batch [%d, %d] with seed %llu\n", o.weights.c_str(), z.B, z.S,
                static_cast<unsigned long long>(o.run.seed));
    w.batch = random_batch(z.B, z.S, z.V, o.run.seed);
  }
}

// --pp or --micro-batches: the step's M micro-batches through the pipeline
// (or accumulated on one rank); each stage's activation peak printed.
void run_pipelined_grads(const GradsOptions& o, LoadedWeights& w) {
  if (o.tp > 1 || o.ep > 1 || o.sp || o.cp > 1)
    throw UserError("--pp or --micro-batches with --tp, --sp, --ep or --cp: not yet");
  const pipeline::PipelineSettings& pipe = o.pipe;
  apply_pipeline_step_layout(w.setup, pipe);
  w.model = models().find(w.setup.model).make(w.setup.sizes);
  const std::vector<std::string> specs = {one_strategy(o, w.setup)};
  if (parse_strategy(specs[0]).planned) throw UserError("--pp or --micro-batches with a budget: not yet");
  require_step_memory(w.setup, o.run.attention, specs, 3, o.force);
  const std::vector<Batch> batches = micro_batches_of(o, w);
  // Every rank fine-tunes the whole model alike (each stage then reads its own).
  fine_tune(w.params, *w.model, batches.front(), o.finetune, o.run.seed, w.setup);
  auto strategy = make_strategy(specs[0]);
  const pipeline::PipelinedStep r =
      pipeline::pipelined_step(*w.model, *w.params, batches, step_options(o.run, strategy.get()), pipe);
  require_finite_result(r.loss, *w.params);
  if (!o.out.empty() && comm::rank() == 0) write_gradients(o.out, w.setup, *w.params, r.loss);
  std::printf("loss %.9g (the mean of %d micro-batches)\n", r.loss, pipe.micro_batches);
  for (std::size_t s = 0; s < r.stage_peaks.size(); ++s)
    std::printf("stage %zu: layers %s, activation peak %lld bytes, offload peak %lld bytes\n", s,
                r.stage_layers[s].c_str(), static_cast<long long>(r.stage_peaks[s]),
                static_cast<long long>(r.offload_peaks[s]));
  if (!o.out.empty()) std::printf("wrote %s: /loss and /grads for %zu parameters\n", o.out.c_str(), w.params->names().size());
}

// Under a split, each rank of the model's group: its measured activation
// and offload peaks (a rank holds its parts' and its rows' activations).
void print_rank_peaks(const Sizes& z, const StepResult& step) {
  if (!z.split_over_ranks()) return;
  const int N = comm::size(comm::Group::model);
  std::vector<double> all(std::size_t(2 * N));
  const double mine[2] = {double(step.activation_peak), double(step.offload_peak)};
  comm::gather_all(mine, 2, all.data(), comm::Group::model);
  for (int k = 0; k < N; ++k)
    std::printf("rank %d: activation peak %lld bytes, offload peak %lld bytes\n", k,
                static_cast<long long>(all[std::size_t(2 * k)]), static_cast<long long>(all[std::size_t(2 * k + 1)]));
}

// More ranks than a tensor-parallel split uses: data-parallel groups, each
// on its own consecutive sequences of the batch (take_data_group_rows).
int take_group_rows(LoadedWeights& w) {
  return take_data_group_rows(w.setup, *w.batch, "the weight file's: export it with another --batch, or start fewer ranks");
}

void run_grads(const GradsOptions& o) {
  if (!o.out.empty()) check_output(o.out, FileKind::gradients, {o.weights, batch_source_file(o.data)}, o.force);
  LoadedWeights w = load_weights(o.weights, o.force);
  if (o.ep > 1 && o.finetune.lora.any()) throw UserError("--ep with --lora: not yet");
  w.setup.sizes.router_aux = o.router_aux;  // a training setting, not in the file
  pipeline::refuse_without_stages(o.pipe);
  if (o.pipe.stepped()) return run_pipelined_grads(o, w);
  if (apply_split({o.tp, o.sp, o.ep, o.cp}, w.setup, /*data_parallel=*/true)) take_rank_parts(w.setup, w.params);
  choose_batch(o, w);
  const int whole_batch = w.setup.sizes.B, groups = take_group_rows(w);
  w.model = models().find(w.setup.model).make(w.setup.sizes);
  const std::vector<std::string> specs = {one_strategy(o, w.setup)};
  refuse_planned_under_experts(w.setup.sizes, specs);
  const Sizes& z = w.setup.sizes;
  require_step_memory(w.setup, o.run.attention, specs, 3, o.force);
  fine_tune(w.params, *w.model, *w.batch, o.finetune, o.run.seed, w.setup);
  auto strategy = make_strategy(specs[0]);
  // At 16 bits the gradients written are the float32 masters' (docs/precision.md),
  // unscaled at fp16.
  PrecisionScope precision(*w.params, o.run.precision);
  prepare_strategy(*strategy, *w.model, *w.params, *w.batch, o.run.attention, o.run.seed);
  const comm::Stats before = comm::stats();
  const StepResult step = run_step(*w.model, *w.params, *w.batch, step_options(o.run, strategy.get()));
  const std::int64_t sent = comm::stats().bytes_sent - before.bytes_sent;  // the step's own collectives
  double loss = step.loss;
  if (z.cp.split()) {  // each rank's share of its rows: the group's sequences' loss and gradients summed
    loss = comm::sum_in_rank_order(loss, comm::Group::context);
    sum_gradients_over_ranks(*w.params, comm::Group::context);
  }
  if (groups > 1) loss = average_over_data_groups(*w.params, loss);
  require_finite_result(loss, *w.params);
  std::size_t written = trainable_tensors(*w.params);
  ModelSetup whole_setup = w.setup;  // the whole model's, on the whole batch
  whole_setup.sizes = whole_setup.sizes.whole_model();
  whole_setup.sizes.B = whole_batch;
  if (z.tp.split() || z.ep.split()) {  // the whole model's gradients, from every rank's parts
    const auto whole = whole_store(w.setup, *w.params, /*with_gradients=*/true);
    written = trainable_tensors(*whole);
    if (!o.out.empty() && comm::rank() == 0) write_gradients(o.out, whole_setup, *whole, loss);
  } else if (!o.out.empty() && comm::rank() == 0) {
    write_gradients(o.out, whole_setup, *w.params, loss);
  }
  print_rank_peaks(z, step);
  std::printf("loss %.9g%s\n", loss,
              groups > 1 ? (" (the mean of " + std::to_string(groups) + " data-parallel groups' " + std::to_string(z.B) +
                            " sequences each)").c_str() : "");
  if (z.split_over_ranks()) std::printf("sent %lld bytes to the other ranks\n", static_cast<long long>(sent));
  if (!o.out.empty()) std::printf("wrote %s: /loss and /grads for %zu parameters\n", o.out.c_str(), written);
}

}  // namespace

void setup_grads(CLI::App& app) {
  auto o = std::make_shared<GradsOptions>();
  auto* cmd = app.add_subcommand("grads", "Run one forward and backward on a weight file; write loss and gradients");
  cmd->add_option("--weights", o->weights, "HDF5 weight file (docs/models.md layout)")->required();
  cmd->add_option("--out", o->out, "Output HDF5 file for /loss and /grads/<name>");
  add_run_options(*cmd, o->run, "Seed of the batch (when the file carries none) and of dropout");
  add_router_aux_option(*cmd, o->router_aux);
  add_tp_options(*cmd, o->tp, o->sp);
  add_ep_option(*cmd, o->ep);
  add_cp_option(*cmd, o->cp);
  add_pipeline_options(*cmd, o->pipe);
  cmd->add_option("--data", o->data, "Batch source instead of the file's batch (see `remat check --help`)");
  add_fine_tuning_options(*cmd, o->finetune);
  quantized_precision_default(*cmd, o->finetune.quantize, o->run.precision);
  cmd->add_option("--strategy", o->strategy, "Activation-memory strategy (see `remat strategies`)")
      ->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace an existing file of another kind; skip the memory check");
  cmd->callback([o] { run_grads(*o); });
}

namespace {
const RegisterCommand register_grads(30, setup_grads);
}  // namespace

}  // namespace remat::cli
