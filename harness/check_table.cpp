#include "harness/check_table.hpp"

#include <cstdio>

namespace remat {
namespace {

// Dequantization's columns are in the JSON always, in the text where weights are quantized.
std::vector<Column> check_columns(bool quantized) {
  const double mib = 1 << 20;
  const auto sci = [](const Cell& c) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2e", number(c));
    return std::string(buf);
  };
  return {{"strategy", "strategy", nullptr, true},
          {"loss", "loss", decimals(8)},
          {"max_abs_diff", "max abs", sci},
          {"max_rel_diff", "max rel", sci},
          {"bitwise", "bitwise", [](const Cell& c) { return std::get<bool>(c) ? "yes" : "no"; }},
          {"activation_peak_bytes", "act MiB", decimals(2, mib)},
          {"predicted_peak_bytes", "pred MiB", decimals(2, mib)},
          {"vs_full", "ratio", decimals(3)},
          {"offload_peak_bytes", "offl. MiB", decimals(2, mib)},
          {"recompute_share", "recomp.", percent(1)},
          {"step_seconds", "time s", decimals(3)},
          {"dequantize_flops", "", nullptr},
          {"recompute_dequantize_flops", "", nullptr},
          {"dequantize_seconds", quantized ? "deq. s" : "", decimals(3)},
          {"recompute_dequantize_seconds", quantized ? "recomp. deq. s" : "", decimals(3)},
          {"exact", "", nullptr}};  // JSON only: whether the strategy is meant to be bitwise full
}

}  // namespace

const char* const kCheckLegend =
    "act MiB: device-pool peak during the step minus what was live before it (parameters, gradients, batch);\n"
    "pred MiB: predicted from one probe step (each block's saved bytes and working set) by the strategy's plan;\n"
    "ratio: act / full's; offl. MiB: offload-pool peak; recomp.: share of the step's GEMM FLOPs spent recomputing.\n";

CheckSummary check_summary(const CheckReport& report, ops::AttentionKernel attention) {
  CheckSummary out;
  const bool quantized = report.full.dequantize_flops > 0;
  out.table.columns = check_columns(quantized);
  out.legend = kCheckLegend;
  if (quantized)
    out.legend += "deq. s: the step's time dequantizing quantized weights for their products (fenced; its FLOPs in "
                  "--json), and of it recomp. deq. s inside recomputation.\n";
  for (const auto& r : report.rows) {
    const StepResult& s = r.step;
    const bool ok = !r.exact || r.vs_full.bitwise;
    out.failures += ok ? 0 : 1;
    out.table.add({r.strategy, s.loss, r.vs_full.max_abs, r.vs_full.max_rel, r.vs_full.bitwise, s.activation_peak,
                   r.predicted.device, double(s.activation_peak) / double(report.full.activation_peak), s.offload_peak,
                   s.flops > 0 ? s.recompute_flops / s.flops : 0.0, s.seconds, s.dequantize_flops,
                   s.recompute_dequantize_flops, s.dequantize_seconds, s.recompute_dequantize_seconds, r.exact});
    if (!ok) out.notes.push_back(r.strategy + ": NOT BITWISE EQUAL TO full (an exact strategy)");
    const std::string same = same_as_full(r.strategy, s, report.full, attention);
    if (!same.empty()) out.notes.push_back(r.strategy + " " + same);
  }
  return out;
}

}  // namespace remat
