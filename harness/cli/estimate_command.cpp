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

#include "core/error.hpp"
#include "core/text.hpp"
#include "estimate/device_model.hpp"
#include "estimate/pipeline_stages.hpp"
#include "estimate/devices.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "h5/atomic_file.hpp"
#include "harness/report/table.hpp"
#include "harness/cli/validators.hpp"
#include "harness/estimate_grid.hpp"
#include "harness/estimate_table.hpp"
#include "harness/long_run.hpp"
#include "harness/report/svg_chart.hpp"
#include "pipeline/stage_runner.hpp"
#include "step/probe.hpp"
#include "strategies/registry.hpp"
#include "zoo/configs.hpp"
#include "zoo/expert_parallel.hpp"

namespace remat::cli {
namespace {

struct EstimateOptions {
  std::string model = "gpt2", preset = "small", config, strategies = "all", device, optimizer = "adamw", svg;
  ops::AttentionKernel attention = ops::AttentionKernel::fused;
  Precision precision = Precision::fp32;
  int layers = 0, ranks = 1, tp = 1, ep = 1, cp = 1, experts = 0, top_k = 0;
  double dropout = 0;
  bool sp = false;
  std::vector<int> seq, batch;
  bool json = false, shard_params = false, allow_longer = false;
  bool model_given = false, preset_given = false;  // beside --config: refused, as everywhere
  FineTuning finetune;  // --freeze, --lora, --quantize
  pipeline::PipelineSettings pipe;  // --pp, --micro-batches, --schedule, --stage-layers
};

double gib(std::int64_t bytes) { return double(bytes) / double(std::int64_t(1) << 30); }

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

// The options as a request: the model and sizes from --config or --preset.
EstimateRequest request_of(const EstimateOptions& o) {
  EstimateRequest r;
  if (!o.config.empty()) {
    const PublishedConfig& c = published_config(o.config);
    if (o.preset_given) throw UserError("--config and --preset both name the sizes: give one");
    if (o.model_given && o.model != c.model)
      throw UserError("--model " + o.model + " and --config " + o.config + ": that configuration is a " + c.model);
    r.base = {c.model, o.config, c.sizes};
  } else {
    r.base = {o.model, o.preset, preset_sizes(o.preset)};
  }
  if (o.layers) r.base.sizes.L = o.layers;
  r.base.sizes.dropout = o.dropout;
  ep::override_experts(r.base.model, r.base.sizes, o.experts, o.top_k);
  r.base.sizes.tp = RankGroup::tensor(o.tp, 0, o.sp);  // rank 0's parts: every rank's are the same shapes
  r.base.sizes.ep = RankGroup::expert(o.ep);  // (and under expert parallelism, for a balanced routing)
  r.base.sizes.cp = RankGroup::context(o.cp);  // (and under context parallelism: the zig-zag evens the ranks' work)
  r.published = !o.config.empty();
  r.allow_longer = o.allow_longer;
  r.seqs = o.seq;
  r.batches = o.batch;
  r.attention = o.attention;
  r.strategies = strategies_for(r.base.model, o.strategies, r.attention);
  r.precision = o.precision;
  r.optimizer = o.optimizer;
  r.ranks = o.ranks;
  r.shard_params = o.shard_params;
  r.finetune = o.finetune;
  r.pipe = o.pipe;
  if (!o.device.empty()) r.device = find_device(o.device);
  return r;
}

// ", tensor-parallel 8, 64 data-parallel ranks (parameters sharded)", or nothing.
std::string layout_text(const EstimateRequest& r) {
  std::string s;
  if (r.base.sizes.tp.split()) s += ", tensor-parallel " + std::to_string(r.base.sizes.tp.size);
  if (r.base.sizes.tp.sequence) s += " with sequence parallelism";
  if (r.base.sizes.cp.split()) s += ", context-parallel " + std::to_string(r.base.sizes.cp.size);
  if (r.base.sizes.ep.split())
    s += ", expert-parallel " + std::to_string(r.base.sizes.ep.size) + " (routing assumed balanced)";
  const bool split = r.base.sizes.split_over_ranks();
  if (r.ranks > 1) s += ", " + std::to_string(r.ranks) + (split ? " data-parallel" : "") + " ranks";
  if (r.shard_params) s += " (parameters sharded)";
  return s;
}

void print_header(const EstimateRequest& r) {
  const Sizes& z = r.base.sizes;
  char dropout[32] = "";
  if (z.dropout > 0) std::snprintf(dropout, sizeof dropout, ", dropout %g", z.dropout);
  std::printf("remat estimate: %s %s (L %d, D %d, H %d, Hkv %d, F %d, V %d)%s, %s attention, %s, %s%s, shape-only\n",
              r.base.model.c_str(), r.base.preset.c_str(), z.L, z.D, z.H, z.Hkv, z.F, z.V, dropout,
              ops::attention_kernel_name(r.attention), precision_name(r.precision), r.optimizer.c_str(),
              layout_text(r).c_str());
  const Device& d = r.device;
  if (!d.name.empty())
    std::printf("device %s: %.1f GiB, of which %.1f GiB fixed overhead (CUDA context, cuBLAS workspace, allocator "
                "reserve; docs/estimates.md): %.1f GiB usable\n",
                d.name.c_str(), gib(d.memory_bytes), gib(d.overhead_bytes), gib(d.usable()));
}

// A point as text: what a rank keeps, then its table (GiB where the table
// reaches one, MiB below, named so).
void print_point(const EstimateRequest& r, const EstimatePoint& p) {
  const int bits = p.largest_total() >= (std::int64_t(1) << 30) ? 30 : 20;
  const char* unit = bits == 30 ? "GiB" : "MiB";
  const auto size = [&](std::int64_t bytes) { return fixed(double(bytes) / double(std::int64_t(1) << bits), 2) + " " + unit; };
  const RankGroup& ep = p.setup.sizes.ep;
  const char* per_rank = r.ranks > 1 || r.base.sizes.tp.split() || ep.split() || r.base.sizes.cp.split() ? " per rank" : "";
  // Under expert parallelism B is the group's batch, B / N sequences on each rank.
  const std::string batch = ep.split() ? std::to_string(p.setup.sizes.B) + " over the expert-parallel group (" +
                                             std::to_string(p.setup.sizes.B / ep.size) + " per rank)"
                                       : std::to_string(p.setup.sizes.B) + per_rank;
  const std::string trainable =
      p.trainable < p.parameters ? " (trainable " + size(p.trainable) + ")" : std::string();
  const std::string quantized =
      p.quantized ? " and quantized base " + size(p.quantized) + " (dequantized a weight at a time: at most " +
                        size(p.dequantize) + " of act)"
                  : std::string();
  std::printf("\nS %d, B %s: parameters %s%s%s, gradients %s, optimizer state %s%s%s (%lld parameters)\n",
              p.setup.sizes.S, batch.c_str(), size(p.parameters).c_str(), trainable.c_str(), quantized.c_str(),
              size(p.gradients).c_str(),
              size(p.optimizer).c_str(), p.weight_copy ? (", 16-bit weight copy " + size(p.weight_copy)).c_str() : "",
              per_rank, (long long)p.parameter_count);
  std::printf("%s", render_text(point_table(r, p, bits)).c_str());
  std::fflush(stdout);  // each grid point's table as it is done, piped or not
}

// Under a device, for each strategy that does not fit: the sizes (and,
// sharded, the ranks) at which it would, each from a shape-only run.
void print_refits(const EstimateRequest& r, const ModelSetup& setup, const std::vector<Refit>& refits) {
  if (refits.empty()) return;
  std::printf("does not fit %s; it would:\n", r.device.name.c_str());
  const Sizes& z = setup.sizes;
  for (const Refit& f : refits) {
    std::vector<std::string> ways;
    if (f.batch) ways.push_back("at B " + std::to_string(f.batch) + " (S " + std::to_string(z.S) + ")");
    if (f.seq) ways.push_back("at S " + std::to_string(f.seq) + " (B " + std::to_string(z.B) + ")");
    if (f.ranks) ways.push_back("over " + std::to_string(f.ranks) + " sharded ranks");
    std::printf("  %s: %s\n", f.strategy.c_str(),
                ways.empty() ? "not at any smaller B or S (weights, gradients and optimizer state alone are too many: "
                               "more ranks with --shard-params, --tp or --pp)"
                             : join(ways, ", or ").c_str());
  }
}

void print_footnotes(bool shard_params, Precision precision, bool quantized) {
  std::printf("\nact: the activation peak of one training step, exact (the tracker's count of a shape-only run of the "
              "model's own code);\n");
  if (shard_params)
    std::printf("gathered: the most whole parameters a rank holds at once (those of the block running, and those used "
                "outside blocks for the whole step%s); reducing: the most whole gradients awaiting their "
                "reduce-scatter (float32);\n",
                precision == Precision::fp32 ? ""
                                             : ", in 16 bits: each rank converts its float32 shard and the ranks "
                                               "exchange 16-bit values, as FSDP's mixed precision, so no whole 16-bit "
                                               "copy is kept");
  std::printf("total: parameters%s + gradients + optimizer state%s%s + act, per rank; T/MFLOP/step: "
              "GEMM FLOPs of forward and backward, recomputation included.\n",
              quantized ? " + quantized base" : "",
              shard_params || precision == Precision::fp32 ? "" : " + the 16-bit weight copy",
              shard_params ? " + gathered + reducing" : "");
  if (quantized)
    std::printf("quantized base: the frozen block weights in their format, scales included (docs/fine-tuning.md); act "
                "includes the one weight at a time each product dequantizes.\n");
}

// What the device figures assume, beside them (docs/estimates.md says why).
void print_device_assumptions(const EstimateRequest& r) {
  const Device& d = r.device;
  if (d.fp32_flops <= 0) return;
  const DeviceModel m{};  // its default rates
  const bool half = r.precision != Precision::fp32;
  std::printf("model s: %s's GEMM FLOPs at %.0f%% of %.0f TFLOP/s (%s), each byte of a tensor made touched %.0f times at "
              "%.0f%% of %.0f GB/s; collectives at %.0f%% of the peer link's %.0f GB/s, not overlapped; offload copies at "
              "the host link's %.0f GB/s each way, one at a time, hidden only behind the compute beside them (copy "
              "wait: what was not hidden).\n",
              d.name.c_str(), 100 * m.gemm_efficiency, (half ? d.half_flops : d.fp32_flops) / 1e12,
              half ? "16-bit" : "fp32", m.bytes_touched_per_byte_made, 100 * m.memory_efficiency,
              d.memory_bandwidth / 1e9, 100 * m.link_efficiency, d.peer_link / 1e9, d.host_link / 1e9);
  if (d.host_memory_bytes > 0)
    std::printf("host: %.0f GiB of host memory per GPU for the offload pool (%s).\n", gib(d.host_memory_bytes),
                d.source.c_str());
}

// --pp: a table per grid point, a row per (strategy, stage).
void run_stages(const EstimateOptions& o, const EstimateRequest& r, const std::vector<ModelSetup>& grid) {
  const Sizes& z = r.base.sizes;
  const pipeline::Schedule schedule = pipeline::parse_schedule(r.pipe.schedule);
  pipeline::validate(schedule, z.L, r.pipe.stages, r.pipe.micro_batches, r.pipe.stage_layers);  // before any output
  pipeline::require_stages(r.base.model, z);
  if (!o.json) {
    print_header(r);
    std::printf("pipeline: %d stages, %d micro-batches of B sequences per step, schedule %s\n", r.pipe.stages,
                r.pipe.micro_batches, schedule.spec().c_str());
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const ModelSetup& setup : grid) {
    const auto stages = stage_estimates(r, setup);
    std::int64_t largest = 0;
    for (const auto& per_strategy : stages)
      for (const auto& e : per_strategy.stages)
        largest = std::max(largest, e.total());
    const std::vector<Refit> refits = r.device.name.empty() ? std::vector<Refit>{} : what_would_fit(r, setup, stages);
    if (o.json) {
      for (auto& j : render_json(stage_table(r, setup, stages, 30, refits))) rows.push_back(std::move(j));
      continue;
    }
    std::printf("\nS %d, B %d per micro-batch:\n", setup.sizes.S, setup.sizes.B);
    std::printf("%s", render_text(stage_table(r, setup, stages, largest >= (std::int64_t(1) << 30) ? 30 : 20)).c_str());
    print_refits(r, setup, refits);  // (a strategy fits when every stage does)
    std::fflush(stdout);
  }
  if (o.json) {
    std::printf("%s\n", rows.dump(1).c_str());
    return;
  }
  std::printf("\nin flight: the most micro-batches (chunks, interleaved) a stage has run forward and not yet backward "
              "under the schedule (zb-h1: stage s also holds the weight gradients' inputs of s more); act: its "
              "activation peak over the step, exact (shape-only, as `remat grads --pp` measures it); weights, grads, optimizer (and at 16 bits their copies): of the parameters the stage reads%s.\n",
              r.shard_params ? (", sharded over the " + std::to_string(r.ranks) +
                                " data-parallel replicas of the pipeline (ZeRO-3 within each stage; gathered and "
                                "reducing: the whole values and gradients a rank holds while a block needs them)")
                                   .c_str()
                             : ", not sharded");
  if (r.device.fp32_flops > 0)
    std::printf("busy s: the stage's passes priced by the device model; step s: the step they make under the schedule, "
                "each tensor between stages over the peer link (%.0f GB/s at %.0f%%); bubble: the stages' idle share "
                "of it (1F1B's formula (p-1)/(M+p-1): %.1f%%).\n",
                r.device.peer_link / 1e9, 100 * DeviceModel{}.link_efficiency,
                100 * pipeline::bubble_formula(r.pipe.stages, r.pipe.micro_batches));
  print_device_assumptions(r);
}

void run(const EstimateOptions& o) {
  const EstimateRequest r = request_of(o);
  pipeline::refuse_without_stages(r.pipe);
  if (!r.pipe.split() && r.pipe.micro_batches > 1) throw UserError("--micro-batches applies with --pp N (N of 2 or more)");
  if (r.pipe.split()) return run_stages(o, r, estimate_points(r));
  const std::vector<ModelSetup> grid = estimate_points(r);  // every refusal before any output
  if (!o.json) print_header(r);
  std::fflush(stdout);
  ProgressAfterAWhile progress(r.base.sizes.L);  // past ten seconds (a deep or a wide grid), on stderr
  nlohmann::json rows = nlohmann::json::array();
  Curves curves;
  for (const ModelSetup& setup : grid) {
    const std::string point = "S " + std::to_string(setup.sizes.S) + " B " + std::to_string(setup.sizes.B) + ": ";
    const EstimatePoint p = estimate_point(r, setup, [&](const std::string& stage) { progress.stage(point + stage); });
    for (const auto& row : p.rows) {
      auto& per_batch = curves[setup.sizes.B];
      auto it = std::find_if(per_batch.begin(), per_batch.end(), [&](const auto& c) { return c.first == row.strategy; });
      if (it == per_batch.end()) it = per_batch.insert(per_batch.end(), {row.strategy, {}});
      it->second.push_back({setup.sizes.S, row.total});
    }
    if (o.json) {
      const std::vector<Refit> refits = r.device.name.empty() ? std::vector<Refit>{} : what_would_fit(r, p);
      for (auto& j : render_json(point_table(r, p, 30, refits))) rows.push_back(std::move(j));
    } else {
      print_point(r, p);
      if (!r.device.name.empty()) print_refits(r, p.setup, what_would_fit(r, p));
    }
  }
  if (!o.svg.empty())  // the title says what decides the figures: precision, ranks and sharding too
    write_svg(o.svg, r.base.model + " " + r.base.preset + ", " + precision_name(r.precision) + layout_text(r), curves,
              r.device, o.json);
  if (o.json)
    std::printf("%s\n", rows.dump(1).c_str());
  else {
    print_footnotes(r.shard_params, r.precision, r.finetune.quantize != QuantFormat::none);
    print_device_assumptions(r);
  }
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
  cmd->add_option("--experts", o->experts, "Override a mixture's number of experts E")->check(whole_number(1, 1 << 12));
  cmd->add_option("--top-k", o->top_k, "Override the experts K each token is routed to")->check(whole_number(1, 1 << 12));
  cmd->add_option("--seq", o->seq, "Sequence lengths S (comma-separated: a grid with --batch)")
      ->delimiter(',')
      ->check(whole_number(1, 1 << 24));
  cmd->add_option("--batch", o->batch, "Batch sizes B, per rank (comma-separated)")->delimiter(',')->check(whole_number(1, 1 << 20));
  cmd->add_option("--strategies", o->strategies, "'all' or a comma-separated list (see `remat strategies`)")
      ->capture_default_str();
  cmd->add_option("--dropout", o->dropout,
                  "Dropout probability, as in check and train: a dropout's output is kept beside its input where the next "
                  "op saves it (no mask: masks are drawn again in backward)")
      ->check(CLI::Range(0.0, 0.99).description("from 0 to 0.99"));
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
  cmd->add_option("--tp", o->tp,
                  "Tensor-parallel ranks: every layer split over N ranks as Megatron-LM splits it (docs/scale-out.md); "
                  "memory is per rank, and --ranks counts the data-parallel ranks beside it")
      ->check(whole_number(1, 1 << 12));
  cmd->add_flag("--sp", o->sp, "Sequence parallelism with --tp: norms, dropout and residual adds on 1/N of the sequence");
  cmd->add_option("--ep", o->ep,
                  "Expert-parallel ranks (mixtral): each holds E/N experts and runs B/N of the sequences, tokens sent "
                  "to their experts' ranks by all-to-all; a rank's memory for a balanced routing")
      ->check(whole_number(1, 1 << 12));
  add_cp_option(*cmd, o->cp);
  add_pipeline_options(*cmd, o->pipe);
  add_fine_tuning_options(*cmd, o->finetune);
  quantized_precision_default(*cmd, o->finetune.quantize, o->precision);
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

namespace {
const RegisterCommand register_estimate(150, setup_estimate);
}  // namespace

}  // namespace remat::cli
