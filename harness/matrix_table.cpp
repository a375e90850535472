#include "harness/matrix_table.hpp"

#include <map>
#include <set>

#include "harness/check.hpp"
#include "harness/report/report.hpp"
#include "step/step.hpp"

namespace remat {
namespace {

// A run's shape: its key less the strategy (full's twin has the same).
std::string shape_of(const RunKey& k) {
  RunKey shape = k;
  shape.strategy = "";
  return shape.text();
}

// What tells a run apart from its neighbours: its fine-tuning, and data, a
// seed or a precision other than the defaults.
std::string label_of(const RunKey& k) {
  std::string label = k.strategy + (k.finetune_label.empty() ? "" : " (" + k.finetune_label + ")");
  if (k.data != "random") label += " [" + k.data + "]";
  if (k.run.seed != 1) label += " [seed " + std::to_string(k.run.seed) + "]";
  if (k.run.precision != Precision::fp32) label += " [" + std::string(precision_name(k.run.precision)) + "]";
  return label;
}

std::vector<Column> summary_columns() {
  const double mib = 1 << 20;
  return {{"model", "model"},
          {"strategy", "strategy", nullptr, true},
          {"shape", "shape", nullptr, true},
          {"step_time_median", "step s", decimals(3)},
          {"tokens_per_second", "tokens/s", decimals(0)},
          {"activation_peak_bytes", "act MiB", decimals(1, mib)},
          {"predicted_peak_bytes", "pred MiB", decimals(1, mib)},
          {"vs_full", "vs full", [](const Cell& c) { return fixed(number(c), 2) + "x"; }},
          {"vs_full_spread", "+-", decimals(2)},
          {"offload_peak_bytes", "offl. MiB", decimals(1, mib)},
          {"copies_hidden", "copies hidden", nullptr, true},
          {"recompute_share", "recomp.", percent(1)},
          {"bitwise", "bitwise", [](const Cell& c) { return std::get<bool>(c) ? "yes" : "NO"; }}};
}

// The step time over full's: the median of the rounds' ratios (harness/
// matrix_timing.hpp), or "~ full" where their spread holds 1.00 (a
// difference within noise); the ratio of medians for a record without
// rounds beside full's.
Cell vs_full_cell(const RunRecord& r, const RunRecord* full) {
  const Spread& v = r.time_vs_full;
  if (v.median <= 0) {
    const double full_t = full ? median(full->step_times) : 0;
    return full_t > 0 ? Cell(median(r.step_times) / full_t) : Cell();
  }
  if (r.key.strategy != "full" && v.holds(1)) return "~ full (" + fixed(v.median, 2) + "x)";
  return v.median;
}

}  // namespace

MatrixSummary matrix_summary(const std::vector<RunRecord>& records) {
  std::map<std::string, const RunRecord*> full;
  for (const auto& r : records)
    if (r.key.strategy == "full" && !r.check.oom) full[shape_of(r.key)] = &r;
  MatrixSummary out;
  out.table.columns = summary_columns();
  std::set<std::string> capped;  // shapes whose timing stopped at the cap (noted once)
  for (const auto& r : records) {
    const RunKey& k = r.key;
    const std::string shape = "L" + std::to_string(k.sizes.L) + " S" + std::to_string(k.sizes.S) + " B" + std::to_string(k.sizes.B);
    const std::string label = label_of(k);
    const Cell none;
    if (r.check.oom) {
      std::vector<Cell> row{k.model, label, shape, std::string("OUT OF MEMORY")};
      row.resize(out.table.columns.size());
      out.table.add(std::move(row));
      out.notes.push_back(k.model + " " + label + " " + shape + ": out of memory (over --mem-limit or the device's memory)");
      continue;
    }
    const double t = median(r.step_times);
    const StepResult& st = r.check.step;
    const auto f = full.find(shape_of(k));
    const RunRecord* twin = f != full.end() ? f->second : nullptr;
    const Cell spread = r.time_vs_full.median > 0 && k.strategy != "full" ? Cell(r.time_vs_full.half_iqr) : none;
    if (r.timing_capped && capped.insert(shape_of(k)).second)
      out.notes.push_back(k.model + " " + shape + ": timed " + std::to_string(r.step_times.size()) +
                          " rounds, the cap (--max-steps), before every ratio to full was within --spread");
    out.table.add({k.model, label, shape, t, double(k.sizes.B) * k.sizes.S / t, st.activation_peak,
                   r.check.predicted.device, vs_full_cell(r, twin), spread, st.offload_peak,
                   copy_cost(st.offload_copy_seconds, st.offload_wait_seconds),
                   st.flops > 0 ? st.recompute_flops / st.flops : 0.0, r.check.vs_full.bitwise});
    if (f != full.end()) {
      const std::string same = same_as_full(k.strategy, st, f->second->check.step, k.run.attention);
      if (!same.empty()) out.notes.push_back(k.model + " " + k.strategy + " " + shape + ": " + same);
    }
  }
  return out;
}

}  // namespace remat
