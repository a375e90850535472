// remat estimate: what a training step of any size would hold and compute,
// per strategy, from a shape-only run of the real model code
// (estimate/shape_only_step.hpp), and whether it fits a named device.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "estimate/device_model.hpp"
#include "estimate/devices.hpp"
#include "estimate/shape_only_step.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "h5/atomic_file.hpp"
#include "harness/cli/validators.hpp"
#include "harness/long_run.hpp"
#include "harness/report/svg_chart.hpp"
#include "optim/optimizer.hpp"
#include "step/probe.hpp"
#include "strategies/registry.hpp"
#include "train/param_shards.hpp"
#include "zoo/configs.hpp"

namespace remat::cli {
namespace {

struct EstimateOptions {
  std::string model = "gpt2", preset = "small", config, strategies = "all", device, optimizer = "adamw", svg;
  ops::AttentionKernel attention = ops::AttentionKernel::fused;
  Precision precision = Precision::fp32;
  int layers = 0, ranks = 1;
  std::vector<int> seq, batch;
  bool json = false, shard_params = false, allow_longer = false;
  bool model_given = false, preset_given = false;  // beside --config: refused, as everywhere
};

double gib(std::int64_t bytes) { return double(bytes) / double(std::int64_t(1) << 30); }

// A right-aligned table cell, 13 wide and a space before it.
std::string cell(const std::string& text) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " %13s", text.c_str());
  return buf;
}

// What one rank keeps under --shard-params, as training shards
// (train/param_shards.hpp): 1/ranks of each parameter rounded up to whole
// chunks of 1024 values, their gradients, and the optimizer's state over
// them, counted by the tracker in a shape-only run. (Plain data parallelism
// keeps all of them on every rank.)
struct RankState {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0;
};
RankState sharded_state(const ModelSetup& setup, int ranks, const std::string& optimizer) {
  ShapeOnlyScope shape_only;
  const auto model = models().find(setup.model).make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  const ParamShards shards(params, ranks);
  auto& tracker = MemoryTracker::instance();
  const std::int64_t before = tracker.stats(MemoryTracker::default_pool()).live;
  OptimizerConfig config;
  config.kind = optimizer;
  const auto state = make_optimizer(config, shards.shards());
  return {shards.shard_bytes(), shards.gradient_bytes(), tracker.stats(MemoryTracker::default_pool()).live - before};
}

// Refuses sizes whose largest per-step tensors would overflow 64-bit byte
// counts (or come near it): one line, before any tensor is made.
void require_countable(const Sizes& z) {
  const long double tokens = (long double)z.B * z.S;
  const long double widest = std::max<long double>({(long double)z.V, (long double)z.F * std::max(1, z.E),
                                                    (long double)z.D * 4, (long double)z.H * z.S});
  const long double bytes = tokens * widest * 4.0L * (z.L + 2);
  if (bytes > 4e18L)
    throw UserError("sizes B " + std::to_string(z.B) + ", S " + std::to_string(z.S) + ", L " + std::to_string(z.L) +
                    " overflow 64-bit byte counts (about " + fixed(double(bytes / 1e18L), 1) + "e18 bytes a step)");
}

// (batch) -> strategy -> (seq, total bytes per rank), in the order met.
using Curves = std::map<int, std::vector<std::pair<std::string, std::vector<std::pair<int, std::int64_t>>>>>;

// DIR/estimate.svg: memory per rank against S, a line per strategy, a panel
// per batch size, the device's usable memory as a dashed line.
void write_svg(const std::string& dir, const std::string& what, const Curves& curves, const Device& device, bool json) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
  std::vector<svg::Chart> panels;
  svg::Palette palette;
  for (const auto& [batch, strategies] : curves) {
    svg::Chart c{what + ", B " + std::to_string(batch), "sequence length S", "memory per rank (GiB)", true, true, {}};
    int lo = 0, hi = 0;
    for (const auto& [strategy, points] : strategies) {
      svg::Series line{strategy, {}, {}, true, true, false, false, palette(strategy)};
      for (const auto& [seq, bytes] : points) {
        line.x.push_back(seq);
        line.y.push_back(std::max(gib(bytes), 1e-6));
        lo = lo ? std::min(lo, seq) : seq, hi = std::max(hi, seq);
      }
      c.series.push_back(std::move(line));
    }
    if (!device.name.empty())
      c.series.push_back({device.name + " usable (" + human_bytes(double(device.usable())) + ")", {double(lo), double(hi)},
                          {gib(device.usable()), gib(device.usable())}, true, false, true, false, 8});
    panels.push_back(std::move(c));
  }
  write_file_atomically(dir + "/estimate.svg",
                        svg::render("Memory of one training step against sequence length (shape-only, exact)", panels));
  std::fprintf(json ? stderr : stdout, "wrote %s/estimate.svg\n", dir.c_str());  // stdout stays JSON
}

void run(const EstimateOptions& o) {
  ModelSetup base;
  if (!o.config.empty()) {
    const PublishedConfig& c = published_config(o.config);
    if (o.preset_given) throw UserError("--config and --preset both name the sizes: give one");
    if (o.model_given && o.model != c.model)
      throw UserError("--model " + o.model + " and --config " + o.config + ": that configuration is a " + c.model);
    base = {c.model, o.config, c.sizes};
  } else {
    base = {o.model, o.preset, preset_sizes(o.preset)};
  }
  if (o.layers) base.sizes.L = o.layers;
  if (o.ranks < 1) throw UserError("--ranks: at least 1");
  if (o.shard_params && o.ranks < 2) throw UserError("--shard-params shards across ranks: give --ranks 2 or more");
  const Device device = o.device.empty() ? Device{} : find_device(o.device);
  const auto kernel = o.attention;
  const auto specs = strategies_for(base.model, o.strategies, kernel);
  const std::vector<int> seqs = o.seq.empty() ? std::vector<int>{base.sizes.S} : o.seq;
  const std::vector<int> batches = o.batch.empty() ? std::vector<int>{base.sizes.B} : o.batch;
  const bool published = !o.config.empty();  // a preset's S_max moves with --seq, as in every command
  for (int s : seqs)
    if (published && s > base.sizes.S_max && !o.allow_longer)
      throw UserError("--seq " + std::to_string(s) + ": beyond " + base.preset + "'s " + std::to_string(base.sizes.S_max) +
                      " positions (S_max); --allow-longer estimates it anyway, as if the model had that many");

  // Every refusal before any output: the grid's sizes, then the strategies.
  std::vector<ModelSetup> grid;
  for (int b : batches)
    for (int s : seqs) {
      ModelSetup setup = base;
      setup.sizes.S = s;
      setup.sizes.B = b;
      if (!published || s > setup.sizes.S_max) setup.sizes.S_max = s;  // a preset's, or --allow-longer
      validate(setup.sizes);
      require_countable(setup.sizes);
      grid.push_back(setup);
    }
  const bool rates = device.fp32_flops > 0;
  for (const auto& spec : specs)
    if (parse_strategy(spec).planned && !rates)
      throw UserError("strategy '" + spec + "': a budget is planned from costs, and a shape-only run has no kernel to "
                      "time: name a --device to cost it with (" + (device.name.empty() ? "none given" : device.name + " has no rates") +
                      "; docs/estimates.md)");
  const Precision precision = o.precision;
  DeviceModel device_model;
  device_model.device = device;
  device_model.precision = precision;
  // Under --shard-params the shape-only run shards as training does
  // (train/param_shards.hpp): what a rank gathers whole while a block runs,
  // and the whole gradients awaiting their reduce-scatter, are counted by the
  // tracker in pools of their own, at their peaks.
  ShapeOnlyExtras extras;
  if (o.shard_params) {
    if (models().find(base.model).reversible)
      throw UserError("--shard-params: " + base.model + "'s reversible blocks rebuild their inputs in backward, which "
                      "sharded parameters do not support yet");
    const int ranks = o.ranks;
    extras.install = [ranks](ParamStore& p) { return std::shared_ptr<void>(std::make_shared<ParamShards>(p, ranks)); };
    extras.pools = {ParamShards::kGatheredPool, ParamShards::kReducingPool};
  }
  const RankState rank_state = o.shard_params ? sharded_state(base, o.ranks, o.optimizer) : RankState{};
  const auto pool_peak = [](const ShapeOnlyStep& step, const char* pool) {
    const auto it = step.pool_peaks.find(pool);
    return it == step.pool_peaks.end() ? std::int64_t(0) : it->second;
  };

  nlohmann::json rows = nlohmann::json::array();
  Curves curves;
  if (!o.json) {
    const Sizes& z = base.sizes;
    std::printf("remat estimate: %s %s (L %d, D %d, H %d, Hkv %d, F %d, V %d), %s attention, %s, %s%s, shape-only\n",
                base.model.c_str(), base.preset.c_str(), z.L, z.D, z.H, z.Hkv, z.F, z.V, ops::attention_kernel_name(o.attention),
                precision_name(o.precision), o.optimizer.c_str(),
                o.ranks > 1 ? (", " + std::to_string(o.ranks) + " ranks" + (o.shard_params ? " (parameters sharded)" : "")).c_str()
                            : "");
    if (!device.name.empty())
      std::printf("device %s: %.1f GiB, of which %.1f GiB fixed overhead (CUDA context, cuBLAS workspace, allocator "
                  "reserve; docs/estimates.md): %.1f GiB usable\n",
                  device.name.c_str(), gib(device.memory_bytes), gib(device.overhead_bytes), gib(device.usable()));
  }
  std::fflush(stdout);
  // Past ten seconds (a deep or a wide grid), what it is doing, on stderr.
  ProgressAfterAWhile progress(base.sizes.L);
  std::string point;
  extras.progress = [&](const std::string& stage) { progress.stage(point + stage); };
  for (const ModelSetup& setup : grid) {
      const int s = setup.sizes.S, b = setup.sizes.B;
      point = "S " + std::to_string(s) + " B " + std::to_string(b) + ": ";
      const ShapeOnlyRun run =
          shape_only_run(setup, specs, kernel, o.optimizer, rates ? &device_model : nullptr, precision, extras);
      const ShapeOnlyState& st = run.state;
      const std::int64_t params = o.shard_params ? rank_state.parameters : st.parameter_bytes,
                         grads = o.shard_params ? rank_state.gradients : st.gradient_bytes,
                         optimizer = o.shard_params ? rank_state.optimizer : st.optimizer_bytes;
      // The 16-bit copy is whole on every rank (sharded steps at bf16 are refused by train).
      const std::int64_t copies = st.weight_copy_bytes;
      // GiB where a table reaches one, MiB below (small presets), named so.
      std::int64_t largest = params + grads + optimizer + copies;
      for (const auto& step : run.steps)
        largest = std::max(largest, largest + step.activation_peak + pool_peak(step, ParamShards::kGatheredPool) +
                                        pool_peak(step, ParamShards::kReducingPool));
      const bool in_gib = largest >= (std::int64_t(1) << 30);
      const char* unit = in_gib ? "GiB" : "MiB";
      const auto size = [&](std::int64_t bytes) { return double(bytes) / double(std::int64_t(1) << (in_gib ? 30 : 20)); };
      if (!o.json) {
        std::printf("\nS %d, B %d%s: parameters %.2f %s, gradients %.2f %s, optimizer state %.2f %s%s%s (%lld "
                    "parameters)\n",
                    s, b, o.ranks > 1 ? " per rank" : "", size(params), unit, size(grads), unit, size(optimizer), unit,
                    copies ? (", 16-bit weight copy " + fixed(size(copies), 2) + " " + unit).c_str() : "",
                    o.ranks > 1 ? " per rank" : "", (long long)st.parameter_count);
        std::printf("%-26s %12s %12s%s %12s %12s %10s%s%s\n", "strategy", (std::string("act ") + unit).c_str(),
                    (std::string("offload ") + unit).c_str(),
                    o.shard_params ? (cell(std::string("gathered ") + unit) + cell(std::string("reducing ") + unit)).c_str()
                                   : "",
                    (std::string("total ") + unit).c_str(), in_gib ? "TFLOP/step" : "MFLOP/step",
                    "recompute", rates ? "  model s" : "", device.name.empty() ? "" : "  fits (headroom)");
      }
      for (const auto& step : run.steps) {
        const std::int64_t gathered = pool_peak(step, ParamShards::kGatheredPool),
                           reducing = pool_peak(step, ParamShards::kReducingPool);
        const std::int64_t total = params + grads + optimizer + copies + step.activation_peak + gathered + reducing;
        auto& per_batch = curves[b];
        auto it = std::find_if(per_batch.begin(), per_batch.end(), [&](const auto& c) { return c.first == step.strategy; });
        if (it == per_batch.end()) it = per_batch.insert(per_batch.end(), {step.strategy, {}});
        it->second.push_back({s, total});
        const std::int64_t headroom = device.name.empty() ? 0 : device.usable() - total;
        if (o.json) {
          nlohmann::json j = {{"model", setup.model},
                              {"preset", setup.preset},
                              {"strategy", step.strategy},
                              {"seq", s},
                              {"batch", b},
                              {"layers", setup.sizes.L},
                              {"attention", ops::attention_kernel_name(o.attention)},
                              {"precision", precision_name(o.precision)},
                              {"ranks", o.ranks},
                              {"shard_params", o.shard_params},
                              {"parameter_count", st.parameter_count},
                              {"parameter_bytes", params},
                              {"gradient_bytes", grads},
                              {"optimizer_bytes", optimizer},
                              {"weight_copy_bytes", copies},
                              {"activation_peak_bytes", step.activation_peak},
                              {"offload_peak_bytes", step.offload_peak},
                              {"gathered_peak_bytes", gathered},
                              {"reducing_peak_bytes", reducing},
                              {"total_bytes", total},
                              {"flops", step.flops},
                              {"recompute_flops", step.recompute_flops}};
          if (!device.name.empty()) {
            j["device"] = device.name;
            j["device_usable_bytes"] = device.usable();
            j["fits"] = headroom >= 0;
            j["headroom_bytes"] = headroom;
            if (rates) j["modelled_step_s"] = step.modelled_seconds;
          }
          rows.push_back(j);
          continue;
        }
        std::string fits;
        if (!device.name.empty())
          fits = headroom >= 0 ? "  yes (" + fixed(gib(headroom), 1) + " GiB free)"
                               : "  no (" + fixed(gib(-headroom), 1) + " GiB over)";
        const std::string modelled = rates ? "  " + fixed(step.modelled_seconds, step.modelled_seconds < 0.01 ? 6 : 3) : "";
        std::string sharded;  // what --shard-params adds: gathered values, whole gradients awaiting their reduce-scatter
        if (o.shard_params) sharded = cell(fixed(size(gathered), 2)) + cell(fixed(size(reducing), 2));
        std::printf("%-26s %12.2f %12.2f%s %12.2f %12.1f %9.1f%%%s%s\n", step.strategy.c_str(), size(step.activation_peak),
                    size(step.offload_peak), sharded.c_str(), size(total), step.flops / (in_gib ? 1e12 : 1e6),
                    step.flops > 0 ? 100 * step.recompute_flops / step.flops : 0.0, modelled.c_str(), fits.c_str());
      }
      std::fflush(stdout);  // each grid point's table as it is done, piped or not
    }
  if (!o.svg.empty())
    // The title says what decides the figures: precision, ranks and sharding too.
    write_svg(o.svg,
              base.model + " " + base.preset + ", " + precision_name(o.precision) +
                  (o.ranks > 1 ? ", " + std::to_string(o.ranks) + " ranks" : "") +
                  (o.shard_params ? " (parameters sharded)" : ""),
              curves, device, o.json);
  if (o.json) {
    std::printf("%s\n", rows.dump(1).c_str());
    return;
  }
  std::printf("\nact: the activation peak of one training step, exact (the tracker's count of a shape-only run of the "
              "model's own code);\n");
  if (o.shard_params)
    std::printf("gathered: the most whole parameters a rank holds at once (those of the block running, and those used "
                "outside blocks for the whole step); reducing: the most whole gradients awaiting their reduce-scatter;\n");
  std::printf("total: parameters + gradients + optimizer state (+ the 16-bit weight copy)%s + act, per rank; T/MFLOP/step: "
              "GEMM FLOPs of forward and backward, recomputation included.\n",
              o.shard_params ? " + gathered + reducing" : "");
}

}  // namespace

void setup_estimate(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand(
      "estimate", "Memory and FLOPs of a training step at any size, per strategy, from a shape-only run (no data, no "
                  "kernels): will it fit, and what does each strategy cost?");
  auto* model = cmd->add_option("--model", o->model, "Model from the zoo")
                    ->check(CLI::IsMember(models().names()))
                    ->capture_default_str();
  auto* preset = cmd->add_option("--preset", o->preset, "Size preset")->check(CLI::IsMember(preset_names()))->capture_default_str();
  cmd->add_option("--config", o->config,
                  "A published configuration (docs/models.md: e.g. llama-7b, llama-70b, gpt2-1.5b); its model and "
                  "sizes, S its S_max and B 1 unless --seq and --batch say otherwise")
      ->check(CLI::IsMember(config_names()));
  cmd->add_option("--layers", o->layers, "Override the number of blocks L")->check(whole_number(1, 1 << 16));
  cmd->add_option("--seq", o->seq, "Sequence lengths S (comma-separated: a grid with --batch)")
      ->delimiter(',')
      ->check(whole_number(1, 1 << 24));
  cmd->add_option("--batch", o->batch, "Batch sizes B, per rank (comma-separated)")->delimiter(',')->check(whole_number(1, 1 << 20));
  cmd->add_option("--strategies", o->strategies, "'all' or a comma-separated list (see `remat strategies`)")
      ->capture_default_str();
  add_attention_option(*cmd, o->attention);
  add_precision_option(*cmd, o->precision);
  cmd->add_option("--optimizer", o->optimizer, "Whose state to count: adamw (m and v) or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}))
      ->capture_default_str();
  cmd->add_option("--device", o->device,
                  "Say whether it fits: h100-80gb, h200-141gb, a100-40gb, a100-80gb, l4-24gb, rtx4090-24gb, or "
                  "mem:<size> (e.g. mem:80G); a named device also prices each step on its device model and lets "
                  "budget:... strategies plan (docs/estimates.md)");
  cmd->add_option("--ranks", o->ranks, "Data-parallel ranks: memory is per rank")->check(whole_number(1, 1 << 20));
  cmd->add_flag("--shard-params", o->shard_params, "ZeRO-3: each rank keeps 1/ranks of parameters, gradients and optimizer state");
  cmd->add_flag("--allow-longer", o->allow_longer, "Estimate sequences beyond the model's S_max, as if it had those positions");
  cmd->add_option("--svg", o->svg, "Also draw DIR/estimate.svg: memory per rank against S, a panel per batch size, "
                                   "the device's usable memory as a line");
  cmd->add_flag("--json", o->json, "One JSON object per (strategy, seq, batch), fields as docs/results-schema.md says");
  cmd->callback([o, model, preset] {
    o->model_given = model->count() > 0;
    o->preset_given = preset->count() > 0;
    run(*o);
  });
}

}  // namespace remat::cli
