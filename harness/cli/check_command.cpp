// remat check: every strategy against `full` on the same weights and batch:
// loss, gradient error, bitwise equality, measured and predicted activation
// memory, recomputed FLOPs. Exit 1 if an exact strategy is not bitwise equal.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "datasets/batch_source.hpp"
#include "harness/cli/validators.hpp"
#include "harness/long_run.hpp"
#include "harness/estimate_grid.hpp"
#include "harness/pipelined_check.hpp"
#include "harness/tensor_layout.hpp"
#include "harness/io/output_guard.hpp"
#include "train/tensor_parts.hpp"
#include "train/trajectory.hpp"
#include "zoo/tensor_parallel.hpp"

#include "autodiff/ops/ops.hpp"
#include "autodiff/runtime.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "harness/check.hpp"
#include "harness/check_table.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "strategies/registry.hpp"
#include "strategies/trace.hpp"
#include "zoo/context_parallel.hpp"

namespace remat::cli {
namespace {

struct CheckCommandOptions {
  ModelOptions model;
  FineTuning finetune;  // --freeze, --lora, --quantize
  std::string weights;
  std::string strategies = "all";
  double dropout = 0;
  bool trace = false;
  bool data_given = false;  // --data overrides a weight file's batch
  std::string save_golden, golden;
  bool force = false;
  int train_steps = 0;  // > 0: compare whole training runs instead of one step
  bool json = false;
  pipeline::PipelineSettings pipe;  // --pp, --micro-batches, --schedule, --stage-layers
};

// remat check --train-steps N: every strategy trains N steps beside full.
int check_trajectories(const CheckCommandOptions& o, const ModelSetup& setup, const std::vector<std::string>& specs) {
  TrainConfig c;
  c.setup = setup;
  c.run = o.model.run;
  c.data = o.model.data;
  c.steps = o.train_steps;
  c.schedule.lr = 1e-3;
  c.schedule.kind = "constant";
  std::printf("training %d steps (AdamW, lr 1e-3) under full and each strategy, from the same weights and data\n\n",
              c.steps);
  std::printf("%-28s %10s %18s %14s %14s\n", "strategy", "bitwise", "first divergence", "max loss diff", "weights rel");
  int failures = 0;
  for (const auto& r : compare_trajectories(c, specs)) {
    const bool ok = !r.exact || r.bitwise;
    failures += ok ? 0 : 1;
    std::printf("%-28s %10s %18s %14.2e %14.2e%s\n", r.strategy.c_str(), r.bitwise ? "yes" : "no",
                r.first_divergence ? ("step " + std::to_string(r.first_divergence)).c_str() : "none", r.max_loss_diff,
                r.weights_max_rel, ok ? "" : "   <- AN EXACT STRATEGY DIVERGED");
  }
  if (failures) std::fprintf(stderr, "remat check: %d exact strategies trained differently from full\n", failures);
  return failures ? 1 : 0;
}

// What a check runs on: the weights (a file's, a golden's, or initialised
// from the seed), the batch, and the memory the shape-only check expects.
struct CheckInputs {
  ModelSetup setup;
  std::int64_t memory = 0;
  std::unique_ptr<ParamStore> params;
  Batch batch;
  std::optional<Golden> golden;
  int data_groups = 1;  // data-parallel groups beside a split, each on its own sequences
};

// What a step of every strategy asked needs, beside weights, gradients
// and full's reference gradients (UserError past the machine's memory).
std::int64_t require_memory(const CheckCommandOptions& o, const ModelSetup& setup) {
  const auto attention = o.model.run.attention;
  return require_step_memory(setup, attention, strategies_for(setup.model, o.strategies, attention), 3, o.force);
}

CheckInputs load_inputs(const CheckCommandOptions& o) {
  CheckInputs in;
  // The split (--tp, --ep, --cp) before the memory check, which is then
  // this rank's; the whole model's weights made or read, then this rank's parts taken.
  const auto split_sequence = [&] { apply_split(o.model.layout(), in.setup, /*data_parallel=*/true); };
  if (!o.weights.empty() && !o.golden.empty()) throw UserError("--weights and --golden both name the weights: give one");
  if (!o.save_golden.empty())
    check_output(o.save_golden, FileKind::golden, {o.weights, o.golden, batch_source_file(o.model.data)}, o.force);
  if (!o.golden.empty()) in.golden = load_golden(o.golden);
  if (!o.weights.empty() || in.golden) {
    LoadedWeights w = in.golden ? std::move(in.golden->weights) : load_weights(o.weights, o.force);
    in.setup = w.setup;
    if (o.model.seq) {  // the weights' own length is a default; its positions are the limit
      if (o.model.seq > in.setup.sizes.S_max)
        throw UserError("--seq " + std::to_string(o.model.seq) + ": the weights hold positions for " +
                        std::to_string(in.setup.sizes.S_max));
      in.setup.sizes.S = o.model.seq;
    }
    if (o.model.batch) in.setup.sizes.B = o.model.batch;
    if (o.model.seq || o.model.batch) w.batch.reset();
    split_sequence();
    in.memory = require_memory(o, in.setup);
    if (!w.batch || o.data_given) w.batch = o.model.make_batch(in.setup.sizes);
    in.batch = *w.batch;
    in.params = std::move(w.params);
  } else {
    in.setup = o.model.resolve();
    // A deep stack takes a while before its first step: said past ten seconds.
    ProgressAfterAWhile progress(in.setup.sizes.L);
    progress.stage("estimating the memory a step needs");
    split_sequence();
    in.memory = require_memory(o, in.setup);
    in.params =
        std::make_unique<ParamStore>(models().find(in.setup.model).make(in.setup.sizes.whole_model())->params(), DType::f32);
    initialize(*in.params, o.model.run.seed, in.setup.sizes.L, [&](std::size_t i, std::size_t n) {
      if (i % 256 == 0)
        progress.item("initialising the weights: tensor " + std::to_string(i + 1) + " of " + std::to_string(n));
    });
    in.batch = o.model.make_batch(in.setup.sizes);
  }
  take_rank_parts(in.setup, in.params);
  in.setup.sizes.router_aux = o.model.router_aux;  // (a weight file holds none) what the groups' refusal reads
  in.data_groups = take_data_group_rows(in.setup, in.batch, "give another --batch, or start fewer ranks");
  return in;
}

// The table (harness/check_table), its notes and legend.
void print_rows(const CheckSummary& summary) {
  std::printf("\n%s", render_text(summary.table).c_str());
  for (const auto& note : summary.notes) std::printf("  %s\n", note.c_str());
  std::printf("\n%s", summary.legend.c_str());
}

// Reversible strategies' reconstruction errors, and traces where asked.
void print_details(const CheckReport& report) {
  for (const auto& r : report.rows) {
    if (!r.reconstruction) continue;
    std::printf("%s: reconstruction of block inputs, worst block %s: max abs %.3e, max rel %.3e; gradients vs full: "
                "max rel %.3e (%s)\n",
                r.strategy.c_str(), r.reconstruction->block.c_str(), r.reconstruction->max_abs,
                r.reconstruction->max_rel, r.vs_full.max_rel, r.vs_full.worst.c_str());
    for (const auto& b : r.reconstruction_by_block)  // each block's (rounding grows as backward goes down the stack)
      std::printf("  block %-8s max abs %.3e, max rel %.3e\n", b.block.c_str(), b.max_abs, b.max_rel);
  }
  for (const auto& r : report.rows)
    if (!r.trace.empty()) std::printf("\n== trace: %s ==\n%s", r.strategy.c_str(), r.trace.c_str());
}

// Each strategy against the golden file: its comparison and whether it is
// within tolerance (a drift is also said on stderr).
struct GoldenRow {
  const CheckRow* row;
  bool ok;
};
std::vector<GoldenRow> golden_rows(const CheckReport& report, const Golden& golden, const std::string& path) {
  std::vector<GoldenRow> rows;
  for (const auto& r : report.rows) {
    if (!r.vs_golden) continue;
    const auto& g = *r.vs_golden;
    const bool ok = g.loss_diff <= kGoldenLossTolerance * std::abs(golden.loss) && g.max_rel <= kGoldenGradTolerance;
    if (!ok && comm::rank() == 0)  // (split over ranks: the worst rank's error, rank 0's worst parameter)
      std::fprintf(stderr, "remat check: %s drifted from %s: worst parameter %s, relative error %.3e (tolerance %.0e)\n",
                   r.strategy.c_str(), path.c_str(), g.worst.c_str(), g.max_rel, kGoldenGradTolerance);
    rows.push_back({&r, ok});
  }
  return rows;
}

std::size_t drifted(const std::vector<GoldenRow>& rows) {
  return std::size_t(std::count_if(rows.begin(), rows.end(), [](const GoldenRow& g) { return !g.ok; }));
}

void print_golden(const std::vector<GoldenRow>& rows, const std::string& path) {
  for (const auto& [r, ok] : rows)
    std::printf("%-28s vs golden: loss diff %.2e, max rel gradient error %.2e (%s)%s\n", r->strategy.c_str(),
                r->vs_golden->loss_diff, r->vs_golden->max_rel, r->vs_golden->worst.c_str(), ok ? "" : "   <- DRIFT");
  std::printf("golden %s: %s: %zu of %zu strategies within tolerance (loss: relative %.0e; gradients: max "
              "relative %.0e)\n",
              path.c_str(), drifted(rows) ? "DRIFT" : "pass", rows.size() - drifted(rows), rows.size(),
              kGoldenLossTolerance, kGoldenGradTolerance);
}

// check --json: the run, the table's rows, the notes, reversible strategies'
// reconstruction and the golden comparison, as one object.
void print_json(const CheckCommandOptions& o, const ModelSetup& setup, const CheckReport& report,
                const CheckSummary& summary, const std::vector<GoldenRow>& golden) {
  const Sizes& z = setup.sizes;
  nlohmann::json j = {{"model", setup.model},
                      {"preset", setup.preset},
                      {"sizes", {{"L", z.L}, {"D", z.D}, {"H", z.H}, {"S", z.S}, {"B", z.B}}},
                      {"dropout", z.dropout},
                      {"attention", ops::attention_kernel_name(o.model.run.attention)},
                      {"precision", precision_name(o.model.run.precision)},
                      {"backend", Runtime::describe()},
                      {"strategies", render_json(summary.table)},
                      {"notes", summary.notes},
                      {"not_bitwise_exact", summary.failures}};
  for (const auto& r : report.rows)
    if (r.reconstruction)
      j["reconstruction"][r.strategy] = {{"worst_block", r.reconstruction->block},
                                         {"max_abs", r.reconstruction->max_abs},
                                         {"max_rel", r.reconstruction->max_rel}};
  if (!o.golden.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [r, ok] : golden)
      rows.push_back({{"strategy", r->strategy},
                      {"loss_diff", r->vs_golden->loss_diff},
                      {"max_rel", r->vs_golden->max_rel},
                      {"worst", r->vs_golden->worst},
                      {"within_tolerance", ok}});
    j["golden"] = {{"path", o.golden}, {"rows", rows}, {"drifted", drifted(golden)}};
  }
  std::printf("%s\n", j.dump(2).c_str());
}

// check --pp / --micro-batches: the micro-batches (the check's batch, then
// random ones of its shape, seeds seed + 1, ...), every strategy beside
// full under the schedule, a row per strategy and stage.
int run_pipelined_check(const CheckCommandOptions& o, const ModelSetup& setup, const Model& model,
                        const ParamStore& params, const Batch& batch, const std::vector<std::string>& specs) {
  const Sizes& z = setup.sizes;
  for (const auto& spec : specs)
    if (parse_strategy(spec).planned) throw UserError("--pp or --micro-batches with a budget ('" + spec + "'): not yet");
  const pipeline::PipelineSettings& pipe = o.pipe;
  apply_pipeline_step_layout(setup, pipe);
  const std::vector<Batch> micro_batches = micro_batches_from(batch, pipe.micro_batches, z.V, o.model.run.seed);
  std::printf("remat check: %s %s (L %d, D %d, S %d, B %d), %d micro-batches%s, dropout %g, %s\n", setup.model.c_str(),
              setup.preset.c_str(), z.L, z.D, z.S, z.B, pipe.micro_batches,
              pipe.split() ? (", " + std::to_string(pipe.stages) + " stages, " + pipe.schedule).c_str() : ", one rank",
              z.dropout, precision_name(o.model.run.precision));
  ShapeOnlyExtras fine_tuned;  // the predictions' stores fine-tuned as the check's
  fine_tuned.prepare = fine_tuning_prepare(o.finetune, o.model.run.seed, setup);
  const auto rows = pipelined_check(setup, model, params, micro_batches, specs, o.model.run, pipe, fine_tuned);
  int failures = 0;
  for (const auto& r : rows) {
    std::printf("%-24s loss %.9g  %s (largest gradient difference %.2e of its tensor's largest value)\n",
                r.strategy.c_str(), r.loss, r.bitwise ? "bitwise full" : r.exact ? "NOT bitwise full" : "not exact by design",
                r.max_rel_error);
    for (std::size_t s = 0; s < r.stages.size(); ++s)
      std::printf("  stage %zu (layers %s): activation peak %lld bytes (predicted %lld), offload peak %lld (predicted "
                  "%lld)%s\n", s, r.stages[s].layers.c_str(), static_cast<long long>(r.stages[s].activation_peak),
                  static_cast<long long>(r.stages[s].predicted_activation_peak),
                  static_cast<long long>(r.stages[s].offload_peak),
                  static_cast<long long>(r.stages[s].predicted_offload_peak),
                  r.stages[s].as_predicted() ? "" : "   <- NOT AS PREDICTED");
    failures += !r.passed();
  }
  std::printf("%zu strategies: %d failed (exact ones bitwise full, every stage's peaks as predicted)\n", rows.size(),
              failures);
  return failures ? 1 : 0;
}

// The golden file's whole gradients as this rank's parts under --tp (as
// they are otherwise): the same cut as its parameters'.
std::vector<std::vector<float>> split_golden(const std::vector<std::vector<float>>& whole, const ParamStore& params,
                                             const RankGroup& tp) {
  if (!tp.split()) return {};
  std::vector<std::vector<float>> parts(whole.size());
  for (std::size_t i = 0; i < whole.size() && i < params.specs().size(); ++i) {
    if (whole[i].empty()) continue;  // no gradient there (frozen)
    const ParamSpec& spec = params.specs()[i];
    const auto mine = tp::part_values(std::vector<double>(whole[i].begin(), whole[i].end()), spec,
                                      tp::whole_shape(spec, tp.size), tp);
    parts[i].assign(mine.begin(), mine.end());
  }
  return parts;
}

// --save-golden: full's step once more (the table's steps ran strategies),
// its weights, batch, loss and gradients written; under --tp the whole
// model's, gathered from every rank's parts.
void save_golden(const CheckCommandOptions& o, const ModelSetup& setup, const Model& model, const ParamStore& params,
                 const Batch& batch) {
  auto full = make_strategy("full");
  const double loss = forward_backward(model, params, batch, step_options(o.model.run, full.get()));
  require_finite_result(loss, params);
  if (setup.sizes.tp.split()) {
    const auto whole = whole_store(setup, params, /*with_gradients=*/true);  // a collective
    ModelSetup whole_setup = setup;
    whole_setup.sizes = whole_setup.sizes.whole_model();
    if (comm::rank() == 0) write_golden(o.save_golden, whole_setup, *whole, batch, loss);
  } else {
    write_golden(o.save_golden, setup, params, batch, loss);
  }
  if (!o.json) std::printf("wrote golden %s: weights, batch, loss and full's gradients\n", o.save_golden.c_str());
}

// What a check cannot do together (yet), in one line.
void refuse_combinations(const CheckCommandOptions& o, const ModelSetup& setup) {
  pipeline::refuse_without_stages(o.pipe);
  const Sizes& sizes = setup.sizes;
  if ((o.pipe.stepped()) &&
      (sizes.split_over_ranks() || o.train_steps > 0 || o.trace || o.json || !o.golden.empty() ||
       !o.save_golden.empty()))
    throw UserError("--pp or --micro-batches with --tp, --ep, --cp, --train-steps, --trace, --json or a golden file: "
                    "not yet");
  if (o.finetune.any() && o.train_steps > 0)
    throw UserError("--freeze or --lora with --train-steps: not together yet");
  if (o.finetune.quantize != QuantFormat::none && (!o.save_golden.empty() || !o.golden.empty()))
    throw UserError("--quantize with a golden file: not yet");
  const bool split = sizes.split_over_ranks();
  if (split && o.train_steps > 0)
    throw UserError(RankLayout::of(sizes).flags() + " with --train-steps: not yet");
  // Under --tp every rank's gradient of its parts is the whole model's there; under --ep and --cp a rank's
  // gradient of what it shares is its own sequences' or rows' alone.
  if ((sizes.ep.split() || sizes.cp.split() || (sizes.tp.split() && comm::size(comm::Group::data) > 1)) &&
      (!o.save_golden.empty() || !o.golden.empty()))
    throw UserError(RankLayout::of(sizes).flags() +
                    (sizes.ep.split() || sizes.cp.split() ? "" : " beside data-parallel groups") +
                    " with a golden file: not yet");
  if (sizes.ep.split() && o.finetune.lora.any())  // under --tp LoRA splits with its weights; under --cp it is whole
    throw UserError("--ep with --lora: not yet");
  // --freeze: under --tp each rank freezes its parts of the parameters, under --ep those of its experts,
  // under --cp every rank all of them.
  if (sizes.cp.split()) cp::validate(setup.model, sizes);  // --dropout, known only now
}

// What runs: the model and its sizes (this rank's batch), the settings, the
// data-parallel groups beside a split.
void print_header(const CheckCommandOptions& o, const ModelSetup& setup, int data_groups) {
  const Sizes& z = setup.sizes;
  std::printf("remat check: %s %s (L %d, D %d, H %d, S %d, B %d), dropout %g, %s attention, %s, %s\n",
              setup.model.c_str(), setup.preset.c_str(), z.L, z.D, z.H, z.S, z.B, z.dropout,
              ops::attention_kernel_name(o.model.run.attention), precision_name(o.model.run.precision),
              Runtime::describe().c_str());
  print_precision_path(o.model.run.precision);
  if (data_groups > 1)
    std::printf("%d data-parallel groups of %d ranks, each on its own %d of the %d sequences; every step's loss and "
                "gradients averaged over them\n", data_groups, comm::size(comm::Group::model), z.B,
                z.B * data_groups);
}

int run_check_command(const CheckCommandOptions& o) {
  CheckInputs in = load_inputs(o);
  ModelSetup& setup = in.setup;
  const Batch& batch = in.batch;
  std::unique_ptr<ParamStore>& params = in.params;
  setup.sizes.dropout = o.dropout;
  setup.sizes.router_aux = o.model.router_aux;
  validate(setup.sizes);
  const auto model = models().find(setup.model).make(setup.sizes);
  refuse_combinations(o, setup);
  fine_tune(params, *model, batch, o.finetune, o.model.run.seed, setup, o.json);
  const auto specs = strategies_for(setup.model, o.strategies, o.model.run.attention);
  refuse_planned_under_experts(setup.sizes, specs);
  if (o.pipe.stepped()) return run_pipelined_check(o, setup, *model, *params, batch, specs);
  if (o.train_steps > 0) return check_trajectories(o, setup, specs);

  if (!o.json) print_header(o, setup, in.data_groups);
  remat::CheckOptions options;
  options.run = o.model.run;
  options.trace = o.trace;
  if (in.data_groups > 1)
    options.after_step = [&](double loss) { return average_over_data_groups(*params, loss); };
  std::vector<std::vector<float>> golden_parts;  // under --tp: this rank's parts of the golden gradients
  if (in.golden) {
    golden_parts = split_golden(in.golden->grads, *params, setup.sizes.tp);
    options.golden = setup.sizes.tp.split() ? &golden_parts : &in.golden->grads;
    options.golden_loss = in.golden->loss;
  }
  if (isatty(fileno(stderr)))
    options.progress = [](std::size_t i, std::size_t n, const std::string& spec) {
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s", i + 1, n, spec.c_str());
      if (i + 1 == n) std::fprintf(stderr, "\r\033[K");
    };
  // full, then each strategy: a step each (a trace or golden adds none).
  const LongRunNotice notice(setup, std::int64_t(specs.size()) + 1, in.memory, !o.json);
  const CheckReport report = run_check(*model, *params, batch, specs, options);
  if (!o.save_golden.empty()) save_golden(o, setup, *model, *params, batch);

  const CheckSummary summary = check_summary(report, o.model.run.attention);
  const auto golden = in.golden ? golden_rows(report, *in.golden, o.golden) : std::vector<GoldenRow>{};
  if (o.json) {
    print_json(o, setup, report, summary, golden);
  } else {
    print_rows(summary);
    print_details(report);
    if (in.golden) print_golden(golden, o.golden);
  }
  if (summary.failures)
    std::fprintf(stderr, "remat check: %d exact strategies are not bitwise equal to full\n", summary.failures);
  return summary.failures || drifted(golden) ? 1 : 0;
}

}  // namespace

void setup_check(CLI::App& app) {
  auto o = std::make_shared<CheckCommandOptions>();
  auto* cmd = app.add_subcommand("check", "Check every strategy's gradients and memory against full, one step each");
  o->model.bind(*cmd);
  add_tp_options(*cmd, o->model.tp, o->model.sp);
  add_cp_option(*cmd, o->model.cp);
  add_ep_option(*cmd, o->model.ep);
  add_pipeline_options(*cmd, o->pipe);
  add_fine_tuning_options(*cmd, o->finetune);
  quantized_precision_default(*cmd, o->finetune.quantize, o->model.run.precision);
  cmd->add_option("--weights", o->weights, "Take the model, sizes, weights and batch from this HDF5 file instead");
  cmd->add_option("--strategies", o->strategies, "'all' or a comma-separated list (see `remat strategies`)")
      ->capture_default_str();
  cmd->add_option("--dropout", o->dropout, "Dropout probability (masks replay exactly under recomputation)")
      ->check(CLI::Range(0.0, 0.99).description("from 0 to 0.99"));
  cmd->add_option("--save-golden", o->save_golden, "Write weights, batch, loss and full's gradients to this file");
  cmd->add_option("--golden", o->golden, "Compare every strategy with this golden file; exit 1 on drift");
  cmd->add_flag("--force", o->force, "Let --save-golden replace a file of another kind; skip the memory check");
  cmd->add_option("--train-steps", o->train_steps,
                  "Instead of one step: train this many steps under full and each strategy, and compare the losses "
                  "at every step and the final weights; prints the first step that diverges")
      ->check(whole_number(1, 100000));
  cmd->add_flag("--trace", o->trace, "Print, per region, the ops run and recomputed and the bytes kept/dropped/offloaded");
  cmd->add_flag("--json", o->json,
                "Print one JSON object instead of the tables (for scripts): a row per strategy, the notes, the "
                "golden comparison")
      ->excludes("--trace")
      ->excludes("--train-steps");
  cmd->callback([o, cmd] {
    o->data_given = cmd->count("--data") > 0;
    if (const int rc = run_check_command(*o)) throw CLI::RuntimeError(rc);
  });
}

namespace {
const RegisterCommand register_check(50, setup_check);
}  // namespace

}  // namespace remat::cli
