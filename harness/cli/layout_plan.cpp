#include "harness/cli/layout_plan.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "core/text.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/cli/validators.hpp"
#include "harness/layout_search.hpp"
#include "harness/long_run.hpp"
#include "harness/report/table.hpp"
#include "step/probe.hpp"
#include "strategies/registry.hpp"

namespace remat::cli {
namespace {

double gib(std::int64_t bytes) { return double(bytes) / double(std::int64_t(1) << 30); }

// `dropped`: the rows that do not fit (a column says why).
Table verdict_table(const std::vector<const LayoutVerdict*>& rows, const Device& device, bool dropped = true) {
  Table t;
  const auto size = decimals(2, double(std::int64_t(1) << 30));
  t.columns = {{"tp", "tp"}, {"sp", "sp"}, {"cp", "cp"}, {"pp", "pp"}, {"dp", "dp"}, {"sharded", "zero-3"},
               {"micro_batches", "M"}, {"schedule", "schedule", nullptr, true}, {"strategy", "strategy", nullptr, true},
               {"largest_total_bytes", "GiB/GPU", size}, {"hungriest_stage", "on stage"},
               {"step_s", "step s", decimals(3)}, {"exchange_s", "of it dp s", decimals(3)},
               {"bubble", "bubble", percent(1)}, {"tokens_per_s", "tokens/s", decimals(0)},
               {"fits", ""}, {"headroom_bytes", "headroom GiB", size}, {"why_not", dropped ? "does not fit" : "", nullptr, true},
               {"runs", "runs"}, {"flags", ""}};
  for (const LayoutVerdict* v : rows) {
    const TrainingLayout& l = v->layout;
    t.add({std::int64_t(l.tp), l.sp, std::int64_t(l.cp), std::int64_t(l.pp), std::int64_t(l.dp), l.shard,
           std::int64_t(l.micro_batches), l.pp > 1 ? Cell(l.schedule) : Cell("-"), l.strategy, v->largest_total, std::int64_t(v->hungriest_stage), v->step_seconds,
           v->exchange_seconds, v->bubble, v->tokens_per_second(), v->fits, device.usable() - v->largest_total,
           v->fits ? Cell() : Cell(v->why_not), l.runs() ? Cell("yes") : Cell("estimate only"), l.flags()});
  }
  return t;
}

}  // namespace

void add_layout_plan_options(CLI::App& cmd, LayoutPlanOptions& o) {
  cmd.add_option("--gpus", o.gpus,
                 "Plan the layout of a training on G GPUs of --device: every tensor x context x pipeline x data split, "
                 "with --layout-strategies, costed shape-only (exact memory per rank) and priced by the device model "
                 "(docs/estimates.md)")
      ->check(whole_number(1, 1 << 20));
  o.only_with_gpus = {
      cmd.add_option("--gpus-per-node", o.gpus_per_node, "With --gpus: GPUs per node (a tensor-parallel group stays in one)")
          ->check(whole_number(1, 1 << 10))
          ->capture_default_str(),
      cmd.add_option("--global-batch", o.global_batch, "With --gpus: tokens per optimizer step over every replica")
          ->check(whole_number(1, std::int64_t(1) << 40))
          ->capture_default_str(),
      cmd.add_option("--layout-strategies", o.strategies, "With --gpus: the strategies each layout is costed under")
          ->capture_default_str(),
      cmd.add_option("--top", o.top, "With --gpus: how many layouts that fit to list, fastest first")
          ->check(whole_number(1, 1000))
          ->capture_default_str()};
}

void refuse_layout_options(const LayoutPlanOptions& o, bool plan_options_given) {
  if (o.gpus == 0) {
    for (const CLI::Option* option : o.only_with_gpus)
      if (option->count() > 0) throw UserError(option->get_name() + " applies with --gpus (the layout planner)");
    return;
  }
  if (plan_options_given)
    throw UserError("--gpus plans a layout, one sequence per micro-batch: --budget, --allow-offload, --batch, --freeze, "
                    "--lora and --quantize are not searched there yet");
}

namespace {

// The options as a search request, every refusal before any output.
LayoutRequest request_of(const LayoutPlanOptions& o, const ModelOptions& model, const std::string& device) {
  if (model.tp > 1 || model.sp) throw UserError("--gpus searches the tensor-parallel split itself: leave out --tp and --sp");
  if (device.empty()) throw UserError("--gpus needs --device: the layouts are ranked by its device model's step time");
  LayoutRequest r;
  EstimateRequest& p = r.point;
  p.base = model.resolve();
  p.strategies = strategies_for(p.base.model, o.strategies, model.run.attention);
  for (const std::string& s : p.strategies)
    if (parse_strategy(s).planned) throw UserError("--layout-strategies " + s + ": a budget is not costed per layout yet");
  p.attention = model.run.attention;
  p.precision = model.run.precision;
  p.device = find_device(device);
  r.gpus = o.gpus;
  r.gpus_per_node = o.gpus_per_node;
  r.global_batch_tokens = o.global_batch;
  check_request(r);
  return r;
}

// The fastest that fit, the closest that do not, those not costed, the legend.
void print_search(const LayoutPlanOptions& o, const Device& device, const LayoutSearch& search) {
  std::vector<const LayoutVerdict*> fitting, dropped;
  for (const LayoutVerdict& v : search.verdicts) (v.fits ? fitting : dropped).push_back(&v);
  std::printf("%zu layouts x strategies costed, %zu fit in %s's %.1f GiB usable\n", search.verdicts.size(),
              fitting.size(), device.name.c_str(), gib(device.usable()));
  if (fitting.empty())
    std::printf("no layout fits: more GPUs, a shorter sequence, or a strategy that keeps less\n");
  if (fitting.size() > std::size_t(o.top)) fitting.resize(std::size_t(o.top));
  if (!fitting.empty()) {
    std::printf("\nthe fastest that fit:\n%s", render_text(verdict_table(fitting, device, false)).c_str());
    std::printf("as flags: remat estimate ... %s --strategies %s\n", fitting[0]->layout.flags().c_str(),
                fitting[0]->layout.strategy.c_str());
    std::printf("runs: whether remat runs the layout (grads, train) or only estimates it (two of tp, cp and pp "
                "together, or zero-3 beside cp or pp)\n");
  }
  if (dropped.size() > std::size_t(o.top)) dropped.resize(std::size_t(o.top));
  if (!dropped.empty())
    std::printf("\ndropped, the closest to fitting:\n%s", render_text(verdict_table(dropped, device)).c_str());
  if (!search.skipped.empty()) {
    std::printf("\nnot costed:\n");
    for (const std::string& why : search.skipped) std::printf("  %s\n", why.c_str());
  }
  std::printf("\nstep s: the device model's step (docs/estimates.md): M micro-batches of one sequence per replica, under "
              "pp its schedule (1f1b, zb-h1, interleaved:2) replayed over each stage's priced passes, then the gradients' all-reduce over the "
              "data- and context-parallel ranks on the peer link (of it dp s; across nodes the network is slower: "
              "under-priced); zero-3 (--shard-params, searched without cp): the replicas' state sharded (under pp each "
              "stage's), each micro-batch gathering the parameters and reduce-scattering its gradients in place of the "
              "all-reduce (of it dp s). tokens/s: the global batch over the step. GiB/GPU: the hungriest rank's weights, gradients, "
              "optimizer state, 16-bit copy, gathered and reducing peaks and activation peak, exact (without the "
              "running sum of M micro-batches' gradients that remat train keeps beside them: Megatron adds into the "
              "gradients in place).\n");
}

}  // namespace

void run_layout_plan(const LayoutPlanOptions& o, const ModelOptions& model, const std::string& device, bool json) {
  const LayoutRequest r = request_of(o, model, device);
  const EstimateRequest& p = r.point;
  const Sizes& z = p.base.sizes;
  if (!json)
    std::printf("remat plan: %s %s (L %d, S %d) on %d %s, %lld tokens per step (%lld sequences), %s, %s: costing every "
                "layout shape-only...\n",
                p.base.model.c_str(), p.base.preset.c_str(), z.L, z.S, r.gpus, p.device.name.c_str(),
                static_cast<long long>(r.global_batch_tokens), static_cast<long long>(r.global_batch_tokens / z.S),
                precision_name(p.precision), ops::attention_kernel_name(p.attention));
  std::fflush(stdout);
  ProgressAfterAWhile progress(z.L);
  const LayoutSearch search = search_layouts(r, [&](const std::string& layout) { progress.stage(layout); });
  if (!json) return print_search(o, p.device, search);
  std::vector<const LayoutVerdict*> all;
  for (const LayoutVerdict& v : search.verdicts) all.push_back(&v);
  std::printf("%s\n", render_json(verdict_table(all, p.device)).dump(1).c_str());
}

}  // namespace remat::cli
