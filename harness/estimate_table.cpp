#include "harness/estimate_table.hpp"

#include <algorithm>

#include "core/text.hpp"
#include "train/param_shards.hpp"

namespace remat {

namespace {

double gib_of(std::int64_t bytes) { return double(bytes) / double(std::int64_t(1) << 30); }

// A headroom cell as words: "yes (3.1 GiB free)", "no (2.0 GiB over)".
std::string fits(const Cell& c) {
  const double headroom = number(c);
  return headroom >= 0 ? "yes (" + fixed(gib_of(std::int64_t(headroom)), 1) + " GiB free)"
                       : "no (" + fixed(gib_of(std::int64_t(-headroom)), 1) + " GiB over)";
}

// Whether a row fits: the device's memory, and where the rows offload and the
// device has a host memory size, the host's ("device fits" beside "host fits").
std::vector<Column> fit_columns(const Device& d, bool offloads) {
  const bool device = !d.name.empty(), host = d.host_memory_bytes > 0 && offloads;
  return {{"headroom_bytes", device ? (host ? "device fits (headroom)" : "fits (headroom)") : "", fits},
          {"host_headroom_bytes", host ? "host fits (headroom)" : "", fits},
          {"fits", ""}};
}

// Modelled seconds: three decimals, six below a hundredth.
std::string seconds(const Cell& c) { return fixed(number(c), number(c) > 0 && number(c) < 0.01 ? 6 : 3); }

}  // namespace

Table point_table(const EstimateRequest& r, const EstimatePoint& p, int unit_bits, const std::vector<Refit>& refits) {
  const double unit = double(std::int64_t(1) << unit_bits);
  const std::string u = unit_bits == 30 ? "GiB" : "MiB";
  const bool device = !r.device.name.empty(), rates = r.device.fp32_flops > 0;
  const auto size = decimals(2, unit);
  bool offloads = false;
  for (const auto& row : p.rows) offloads = offloads || row.offload > 0;
  const Sizes& z = p.setup.sizes;
  const bool split = z.split_over_ranks() || r.shard_params;
  Table t;
  t.columns = {{"model", ""}, {"preset", ""}, {"strategy", "strategy"}, {"seq", ""}, {"batch", ""}, {"layers", ""},
               {"attention", ""}, {"precision", ""}, {"tp", ""}, {"sp", ""}, {"ep", ""}, {"cp", ""}, {"ranks", ""},
               {"shard_params", ""}, {"parameter_count", ""},
               {"parameter_bytes", ""}, {"trainable_bytes", ""}, {"quantized_bytes", ""},
               {"dequantize_workspace_bytes", ""}, {"gradient_bytes", ""}, {"optimizer_bytes", ""}, {"weight_copy_bytes", ""},
               {"activation_peak_bytes", "act " + u, size}, {"offload_peak_bytes", "offload " + u, size},
               {"gathered_peak_bytes", r.shard_params ? "gathered " + u : "", size},
               {"reducing_peak_bytes", r.shard_params ? "reducing " + u : "", size}, {"total_bytes", "total " + u, size},
               {"flops", unit_bits == 30 ? "TFLOP/step" : "MFLOP/step", decimals(1, unit_bits == 30 ? 1e12 : 1e6)},
               {"recompute_flops", ""}, {"recompute_share", "recompute", percent(1)},
               {"dequantize_flops", ""}, {"recompute_dequantize_flops", ""},
               {"comm_bytes", split ? "sent " + u : "", size}, {"recompute_comm_bytes", ""},
               {"device", ""}, {"device_usable_bytes", ""}, {"modelled_step_s", rates ? "model s" : "", seconds},
               {"modelled_comm_s", rates && split ? "of it comm s" : "", seconds},
               {"modelled_copy_wait_s", rates && offloads ? "of it copy wait s" : "", seconds},
};
  for (Column& c : fit_columns(r.device, offloads)) t.columns.push_back(std::move(c));
  // Where a row does not fit (a device given): the sizes and ranks at which it would.
  for (const char* key : {"would_fit_batch", "would_fit_seq", "would_fit_ranks"}) t.columns.push_back({key, ""});
  for (const auto& row : p.rows) {
    const Cell none;
    const auto refit = std::find_if(refits.begin(), refits.end(), [&](const Refit& f) { return f.strategy == row.strategy; });
    const bool refitted = device && !row.fits() && refit != refits.end();
    t.add({p.setup.model, p.setup.preset, row.strategy, std::int64_t(z.S), std::int64_t(z.B), std::int64_t(z.L),
           ops::attention_kernel_name(r.attention), precision_name(r.precision), std::int64_t(z.tp.size),
           z.tp.sequence, std::int64_t(z.ep.size), std::int64_t(z.cp.size), std::int64_t(r.ranks), r.shard_params,
           p.parameter_count, p.parameters, p.trainable, p.quantized, p.dequantize, p.gradients, p.optimizer, p.weight_copy, row.activation, row.offload,
           row.gathered, row.reducing, row.total, row.flops, row.recompute_flops,
           row.flops > 0 ? row.recompute_flops / row.flops : 0.0, row.dequantize_flops, row.recompute_dequantize_flops,
           row.comm_bytes, row.recompute_comm_bytes,
           device ? Cell(r.device.name) : none,
           device ? Cell(r.device.usable()) : none, rates ? Cell(row.modelled_seconds) : none,
           rates ? Cell(row.modelled_comm_seconds) : none,
           rates ? Cell(row.modelled_copy_wait_seconds) : none, device ? Cell(row.headroom) : none,
           r.device.host_memory_bytes > 0 ? Cell(row.host_headroom) : none, device ? Cell(row.fits()) : none,
           refitted ? Cell(std::int64_t(refit->batch)) : none, refitted ? Cell(std::int64_t(refit->seq)) : none,
           refitted ? Cell(std::int64_t(refit->ranks)) : none});
  }
  return t;
}

Table stage_table(const EstimateRequest& r, const ModelSetup& setup, const std::vector<PipelineEstimate>& stages,
                  int unit_bits, const std::vector<Refit>& refits) {
  const double unit = double(std::int64_t(1) << unit_bits);
  const std::string u = unit_bits == 30 ? "GiB" : "MiB";
  const bool device = !r.device.name.empty(), rates = r.device.fp32_flops > 0;
  const auto size = decimals(2, unit);
  bool offloads = false, quantized = false;
  for (const auto& per_strategy : stages)
    for (const auto& e : per_strategy.stages) {
      offloads = offloads || e.offload_peak > 0;
      quantized = quantized || e.quantized_bytes > 0;
    }
  const auto pool = [](const StageEstimate& e, const char* name) {
    const auto it = e.pool_peaks.find(name);
    return it == e.pool_peaks.end() ? std::int64_t(0) : it->second;
  };
  const Sizes& z = setup.sizes;
  Table t;
  t.columns = {{"model", ""}, {"preset", ""}, {"strategy", "strategy"}, {"seq", ""}, {"batch", ""},
               {"layers", ""}, {"pp", ""}, {"micro_batches", ""}, {"schedule", ""}, {"tp", ""}, {"sp", ""},
               {"cp", ""}, {"ep", ""}, {"ranks", ""}, {"shard_params", ""},
               {"stage", "stage"}, {"stage_layers", "layers", nullptr, true}, {"in_flight", "in flight"},
               {"parameter_count", ""}, {"parameter_bytes", "weights " + u, size},
               {"quantized_bytes", quantized ? "quantized " + u : "", size},
               {"gradient_bytes", "grads " + u, size}, {"optimizer_bytes", "optimizer " + u, size},
               {"weight_copy_bytes", r.precision == Precision::fp32 || r.shard_params ? "" : "16-bit copy " + u, size},
               {"activation_peak_bytes", "act " + u, size}, {"offload_peak_bytes", "offload " + u, size},
               {"gathered_peak_bytes", r.shard_params ? "gathered " + u : "", size},
               {"reducing_peak_bytes", r.shard_params ? "reducing " + u : "", size},
               {"total_bytes", "total " + u, size}, {"modelled_busy_s", rates ? "busy s" : "", seconds},
               {"modelled_step_s", rates ? "step s" : "", seconds}, {"modelled_bubble", rates ? "bubble" : "", percent(1)},
               {"device", ""}, {"device_usable_bytes", ""},
};
  for (Column& c : fit_columns(r.device, offloads)) t.columns.push_back(std::move(c));
  for (const char* key : {"would_fit_batch", "would_fit_seq", "would_fit_ranks"}) t.columns.push_back({key, ""});
  for (std::size_t k = 0; k < stages.size(); ++k)
    for (const StageEstimate& e : stages[k].stages) {
      const auto refit = std::find_if(refits.begin(), refits.end(), [&](const Refit& f) { return f.strategy == r.strategies[k]; });
      const bool refitted = refit != refits.end();
      const std::int64_t total = e.total();
      const Cell none;
      const std::int64_t headroom = device ? r.device.usable() - total : 0;
      const std::int64_t host_headroom = r.device.host_memory_bytes > 0 ? r.device.host_memory_bytes - e.offload_peak : 0;
      t.add({setup.model, setup.preset, r.strategies[k], std::int64_t(z.S), std::int64_t(z.B), std::int64_t(z.L),
             std::int64_t(r.pipe.stages), std::int64_t(r.pipe.micro_batches), r.pipe.schedule,
             std::int64_t(z.tp.size), z.tp.sequence, std::int64_t(z.cp.size), std::int64_t(z.ep.size),
             std::int64_t(r.ranks), r.shard_params, std::int64_t(e.rank), e.layers, std::int64_t(e.most_in_flight),
             e.parameter_count, e.parameter_bytes, e.quantized_bytes, e.gradient_bytes, e.optimizer_bytes,
             e.weight_copy_bytes, e.activation_peak, e.offload_peak, pool(e, ParamShards::kGatheredPool),
             pool(e, ParamShards::kReducingPool), total,
             rates ? Cell(e.modelled_busy_seconds) : none, rates ? Cell(stages[k].modelled_step_seconds) : none,
             rates ? Cell(stages[k].modelled_bubble) : none, device ? Cell(r.device.name) : none,
             device ? Cell(r.device.usable()) : none, device ? Cell(headroom) : none,
             r.device.host_memory_bytes > 0 ? Cell(host_headroom) : none,
             device ? Cell(headroom >= 0 && host_headroom >= 0) : none,
             refitted ? Cell(std::int64_t(refit->batch)) : none, refitted ? Cell(std::int64_t(refit->seq)) : none,
             refitted ? Cell(std::int64_t(refit->ranks)) : none});
    }
  return t;
}

}  // namespace remat
