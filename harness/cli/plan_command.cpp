// remat plan: the schedule `budget:<size>` would run for a model and shape,
// block by block, with its predicted activation peak and step time, from one
// timed probe (nothing else runs; `remat check --strategies budget:...`
// measures it). With --device, at any size: costed by the device model over
// a shape-only run (estimate/device_model.hpp), no probe timed, and the
// budget by default what the device leaves beside the model's state.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/text.hpp"
#include "autodiff/shape_only.hpp"
#include "estimate/device_model.hpp"
#include "estimate/shape_only_step.hpp"
#include "harness/check.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/format.hpp"
#include "harness/cli/layout_plan.hpp"
#include "harness/cli/model_options.hpp"
#include "strategies/planner/solver.hpp"
#include "strategies/registry.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat::cli {
namespace {

struct PlanOptions {
  ModelOptions model;
  LayoutPlanOptions layout;  // --gpus: plan the layout instead
  FineTuning finetune;  // --freeze, --lora, --quantize: the plan of a fine-tuning
  std::string budget, device;
  bool json = false, force = false, allow_offload = false;
};

// The costs and the budget spec: from a timed probe, or (--device) from the
// device model over a shape-only run, the budget defaulting to the memory the
// device leaves beside weights, gradients and optimizer state.
// The fine-tuning --freeze, --lora and --quantize ask for, applied to a store
// (in a shape-only run too).
void fine_tuned(const PlanOptions& o, std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch,
                const ModelSetup& setup) {
  if (o.finetune.applies())
    apply_fine_tuning(params, model, batch, o.finetune, o.model.run.seed, setup);
}

// The device model's costs of the fine-tuned model, shape-only.
SaveProfile device_costs(const PlanOptions& o, const ModelSetup& setup, const DeviceModel& device) {
  ShapeOnlyScope shape_only;
  const auto model = models().find(setup.model).make(setup.sizes);
  auto params = std::make_unique<ParamStore>(model->params(), DType::f32);
  const Batch batch = shape_only_batch(setup.sizes);
  fine_tuned(o, params, *model, batch, setup);
  return modelled_costs(*model, *params, batch, o.model.run.attention, device);
}

SaveProfile plan_costs(const PlanOptions& o, const ModelSetup& setup, std::string& budget) {
  budget = o.budget;
  if (!o.device.empty()) {
    DeviceModel device;
    device.device = find_device(o.device);
    require_rates(device.device);
    if (budget.empty()) {
      ShapeOnlyExtras extras;
      extras.prepare = [&](std::unique_ptr<ParamStore>& p, const Model& model, const Batch& batch) {
        fine_tuned(o, p, model, batch, setup);
      };
      const ShapeOnlyState state = shape_only_run(setup, {}, o.model.run.attention, "adamw", nullptr, Precision::fp32,
                                                  extras).state;
      const std::int64_t held =
          state.parameter_bytes + state.quantized_bytes + state.gradient_bytes + state.optimizer_bytes;
      const std::int64_t left = device.device.usable() - held;
      if (left <= 0)
        throw UserError(o.device + ": weights, gradients and optimizer state (and a 16-bit weight copy) alone take " + human_bytes(double(held)) +
                        " of its " + human_bytes(double(device.device.usable())) +
                        " usable: no schedule fits (remat estimate --ranks N --shard-params divides them)");
      budget = std::to_string(left);
      if (!o.json)
        std::printf("%s: %s usable, %s for weights, gradients and optimizer state (and any 16-bit copy): a budget of %s for activations\n",
                    o.device.c_str(), human_bytes(double(device.device.usable())).c_str(),
                    human_bytes(double(held)).c_str(), human_bytes(double(left)).c_str());
    }
    if (!o.json) std::printf("costing %s %s on the %s model (shape-only, no probe timed)...\n", setup.model.c_str(),
                             setup.preset.c_str(), o.device.c_str());
    return device_costs(o, setup, device);
  }
  if (budget.empty()) throw UserError("--budget: required without --device (a size, a percentage of full's, or min)");
  require_step_memory(setup, o.model.run.attention, {"full"}, 2, o.force);
  const auto model = models().find(setup.model).make(setup.sizes);
  auto params = std::make_unique<ParamStore>(model->params(), DType::f32);
  initialize(*params, o.model.run.seed, setup.sizes.L);
  const Batch batch = o.model.make_batch(setup.sizes);
  fine_tuned(o, params, *model, batch, setup);
  if (!o.json) {
    std::printf("probing %s %s (timed full steps and blocks)...\n", setup.model.c_str(), setup.preset.c_str());
    std::fflush(stdout);
  }
  return measure_costs(*model, *params, batch, o.model.run.attention, o.model.run.seed);
}

// A plan's parts as JSON (fields in this order): each its first and last block and its action
// (keep, with the tags it drops; offload; or a segment, with its own parts).
nlohmann::ordered_json parts_json(const std::vector<planner::PlanPart>& parts, const SaveProfile& p) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& part : parts) {
    nlohmann::ordered_json j = {{"first", p.blocks[std::size_t(part.first)].name}, {"last", p.blocks[std::size_t(part.last)].name}};
    if (part.segment) {
      j["action"] = "segment";
      j["inner"] = parts_json(part.inner, p);
    } else {
      j["action"] = part.offload ? "offload" : "keep";
      j["drop"] = part.drops;
    }
    out.push_back(std::move(j));
  }
  return out;
}

// --tp and --sp: the plan of one rank's part, from the device model only (a
// timed probe on each rank could plan differently).
ModelSetup plan_setup(const PlanOptions& o) {
  ModelSetup setup = o.model.resolve();
  if (o.model.tp == 1 && !o.model.sp) return setup;
  if (o.device.empty())
    throw UserError("--tp: plan with --device (the device model's costs are every rank's; timed ones could differ)");
  setup.sizes.tp = RankGroup::tensor(o.model.tp, 0, o.model.sp);
  tp::validate(setup.model, setup.sizes);
  return setup;
}

void run_plan(const PlanOptions& o) {
  const ModelSetup setup = plan_setup(o);
  if (!o.budget.empty())  // a bad spec is refused before any probe
    strategies_for(setup.model, "budget:" + o.budget + (o.allow_offload ? ":offload" : ""), o.model.run.attention);
  std::string budget;
  const SaveProfile costs = plan_costs(o, setup, budget);
  const std::string spec = "budget:" + budget + (o.allow_offload ? ":offload" : "");
  const auto specs = strategies_for(setup.model, spec, o.model.run.attention);
  auto strategy = make_strategy(specs[0]);
  strategy->plan(costs);  // UserError naming the smallest feasible budget if none fits
  const planner::ChainCosts chain = planner::chain_costs(costs, o.allow_offload);
  auto plan = planner::solve(chain, costs, strategy->activation_budget());
  if (!plan) throw std::logic_error("remat plan: the budget planned once and not again");
  const std::int64_t smallest = planner::smallest_budget(chain, costs);
  if (o.json) {
    const nlohmann::ordered_json j = {{"model", setup.model}, {"preset", setup.preset}, {"strategy", spec},
                              {"budget_bytes", plan->budget}, {"smallest_budget_bytes", smallest},
                              {"full_measured_bytes", costs.measured_peak}, {"predicted_peak_bytes", plan->predicted_peak},
                              {"full_step_s", costs.step_seconds}, {"predicted_recompute_s", plan->recompute_seconds},
                              {"predicted_step_s", plan->predicted_seconds}, {"plan", parts_json(plan->parts, costs)}};
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  const Sizes& z = setup.sizes;
  std::printf("%s %s (L %d, D %d, S %d, B %d), %s attention, %s, %s: a budget of %.2f MiB\n", setup.model.c_str(),
              setup.preset.c_str(), z.L, z.D, z.S, z.B, ops::attention_kernel_name(o.model.run.attention), precision_name(o.model.run.precision),
              spec.c_str(), mib(plan->budget));
  std::printf("%s", planner::describe(*plan, costs).c_str());
  std::printf("predicted activation peak: %.2f MiB (full %s %.2f MiB; smallest feasible budget %.2f MiB)\n",
              mib(plan->predicted_peak), o.device.empty() ? "measured" : "shape-only, exact,", mib(costs.measured_peak),
              mib(smallest));
  std::printf("predicted step: %.3f s = full's %.3f s + %.3f s recomputing\n", plan->predicted_seconds,
              costs.step_seconds, plan->recompute_seconds);
}

}  // namespace

void setup_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "Plan the fastest exact schedule within an activation-memory budget (what --strategies budget:<size> "
              "runs), block by block, with its predicted peak and step time; with --gpus, the fastest layout of a "
              "training on that many GPUs (tensor, context, pipeline and data parallel splits)");
  o->model.preset = "small";
  o->model.bind(*cmd);
  add_tp_options(*cmd, o->model.tp, o->model.sp);
  add_fine_tuning_options(*cmd, o->finetune);
  cmd->add_option("--budget", o->budget,
                  "Activation-memory budget: a size (150MB, 1.5G), a percentage of full's measured peak (40%), or min "
                  "(required without --device)");
  cmd->add_flag("--allow-offload", o->allow_offload,
                 "Let plain blocks move what they save to the host offload pool (what --strategies "
                 "budget:<size>:offload runs); left out by default: on the host backend it costs nothing");
  cmd->add_option("--device", o->device,
                  "Plan at any size for this device (h100-80gb, a100-40gb, ...: docs/estimates.md), costed by its device "
                  "model over a shape-only run instead of a timed probe; --budget defaults to what it leaves beside "
                  "weights, gradients and optimizer state");
  cmd->add_flag("--json", o->json, "Print one JSON object (the plan as a tree) instead of the table");
  cmd->add_flag("--force", o->force, "Run even where the memory estimate says it will not fit");
  add_layout_plan_options(*cmd, o->layout);
  cmd->callback([o] {
    refuse_layout_options(o->layout, !o->budget.empty() || o->allow_offload || o->model.batch > 0 || o->finetune.applies());
    if (o->layout.gpus > 0) return run_layout_plan(o->layout, o->model, o->device, o->json);
    run_plan(*o);
  });
}

namespace {
const RegisterCommand register_plan(100, setup_plan);
}  // namespace

}  // namespace remat::cli
