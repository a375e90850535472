#include "harness/check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "autodiff/memory_tracker.hpp"
#include "comm/comm.hpp"
#include "autodiff/random.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"
#include "strategies/registry.hpp"
#include "strategies/storage.hpp"

namespace remat {

std::vector<std::vector<float>> gradients(const ParamStore& params) {
  std::vector<std::vector<float>> out;
  gradients(params, out);
  return out;
}

void gradients(const ParamStore& params, std::vector<std::vector<float>>& into) {
  const auto& tensors = params.tensors();
  into.resize(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].requires_grad())
      tensors[i].grad().to_host_f32(into[i]);  // float32 gradients as they are (no float64 detour)
    else
      into[i].clear();  // frozen: no gradient
  }
}

GradientComparison compare_gradients(const ParamStore& params, const std::vector<std::vector<float>>& got,
                                     const std::vector<std::vector<float>>& reference, double loss,
                                     double reference_loss, double floor) {
  GradientComparison c;
  double largest = 0;
  for (const auto& r : reference)
    for (float v : r) largest = std::max(largest, double(std::abs(v)));
  // A NaN anywhere is a mismatch, never a zero error (NaN compares false).
  const double inf = std::numeric_limits<double>::infinity();
  auto gap = [inf](double a, double b) { return std::isfinite(a) && std::isfinite(b) ? std::abs(a - b) : inf; };
  c.loss_diff = gap(loss, reference_loss);
  c.bitwise = std::memcmp(&loss, &reference_loss, sizeof loss) == 0 && std::isfinite(loss);
  for (std::size_t i = 0; i < got.size(); ++i) {
    double diff = 0, scale = 0;
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      diff = std::max(diff, gap(got[i][j], reference[i][j]));
      scale = std::max(scale, double(std::abs(reference[i][j])));
    }
    c.bitwise = c.bitwise && diff == 0 && got[i].size() == reference[i].size() &&
                (got[i].empty() ||  // a frozen parameter: no gradient on either side
                 std::memcmp(got[i].data(), reference[i].data(), got[i].size() * sizeof(float)) == 0);
    c.max_abs = std::max(c.max_abs, diff);
    scale = std::max(scale, floor * largest);
    const double rel = diff == inf ? inf : scale > 0 ? diff / scale : diff;
    c.abs_by_param.push_back(diff);
    c.rel_by_param.push_back(rel);
    if (rel > c.max_rel || c.worst.empty()) {
      c.max_rel = std::max(c.max_rel, rel);
      c.worst = params.names()[i];
    }
  }
  return c;
}

namespace {

// One strategy's step into row.step; false where it ran out of memory (the
// row says so). Split over ranks, an out-of-memory ends the check instead
// (every rank is stopped, comm/): one rank's row would leave the others
// waiting in a collective.
bool measured_step(const Model& model, const ParamStore& params, const Batch& batch, Strategy& strategy,
                   const CheckOptions& options, CheckRow& row) {
  const auto step = [&] {
    StepOptions o = step_options(options.run, &strategy);
    o.timeline = options.timeline;
    row.step = run_step(model, params, batch, o);
    if (options.after_step) row.step.loss = options.after_step(row.step.loss);
  };
  if (!model.sizes().split_over_ranks()) return within_limit(options.mem_limit, step);
  step();
  return true;
}

// Split over ranks, each rank compares its own part of the gradients: a
// strategy is bitwise full (or the golden file's) only where it is on every
// rank of the group, and its errors are the worst rank's (the worst
// parameter's name stays rank 0's).
void agree_on_comparisons(CheckReport& report) {
  std::vector<GradientComparison*> comparisons;  // every row's against full, then against the golden file
  for (auto& r : report.rows) comparisons.push_back(&r.vs_full);
  for (auto& r : report.rows)
    if (r.vs_golden) comparisons.push_back(&*r.vs_golden);
  std::vector<double> mine;
  for (const GradientComparison* c : comparisons)
    mine.insert(mine.end(), {c->bitwise ? 0.0 : 1.0, c->loss_diff, c->max_abs, c->max_rel});
  const int ranks = comm::size(comm::Group::model);
  std::vector<double> all(mine.size() * std::size_t(ranks));
  comm::gather_all(mine.data(), std::int64_t(mine.size()), all.data(), comm::Group::model);
  for (std::size_t i = 0; i < comparisons.size(); ++i) {
    GradientComparison& c = *comparisons[i];
    for (int k = 0; k < ranks; ++k) {
      const double* theirs = &all[std::size_t(k) * mine.size() + 4 * i];
      c.bitwise = c.bitwise && theirs[0] == 0;
      c.loss_diff = std::max(c.loss_diff, theirs[1]);
      c.max_abs = std::max(c.max_abs, theirs[2]);
      c.max_rel = std::max(c.max_rel, theirs[3]);
    }
  }
}

}  // namespace

CheckReport run_check(const Model& model, const ParamStore& params, const Batch& batch,
                                const std::vector<std::string>& strategies, const CheckOptions& options) {
  // A warm-up step: one-time allocations (gradients, runtime scratch) must
  // not be counted against the first strategy measured.
  // One set of 16-bit weight copies for every step (and the profiles): the
  // weights do not change between them.
  const RunSettings& run = options.run;
  const bool split = model.sizes().split_over_ranks();
  PrecisionScope precision(params, run.precision);
  auto full = make_strategy("full");
  const StepOptions step = step_options(run, full.get());
  forward_backward(model, params, batch, step);
  const SaveProfile profile = profile_saves(model, params, batch, run.attention, run.seed);

  CheckReport report;
  report.full = run_step(model, params, batch, step);
  if (options.after_step) report.full.loss = options.after_step(report.full.loss);
  require_finite_result(report.full.loss, params);
  const auto ref_grads = gradients(params);

  std::optional<SaveProfile> costs;  // measured once, for the first planned strategy
  if (options.costs) costs = *options.costs;
  std::vector<std::vector<float>> grads;  // each strategy's, in the same buffers (no fresh pages to fault in)
  for (const auto& spec : strategies) {
    if (options.progress) options.progress(report.rows.size(), strategies.size(), spec);
    auto strategy = make_strategy(spec);
    if (strategy->needs_costs()) {
      if (!costs) costs = measure_costs(model, params, batch, run.attention, run.seed);
      strategy->plan(*costs);
    }
    strategy->trace().enabled = options.trace;
    CheckRow row;
    row.strategy = spec;
    row.exact = strategy->exact();
    if (!measured_step(model, params, batch, *strategy, options, row)) {
      row.oom = true;
      report.rows.push_back(std::move(row));
      continue;
    }
    gradients(params, grads);
    row.vs_full = compare_gradients(params, grads, ref_grads, row.step.loss, report.full.loss);
    if (options.golden)
      row.vs_golden = compare_gradients(params, grads, *options.golden, row.step.loss, options.golden_loss, 1e-6);
    row.predicted = strategy->predict(profile);
    if (options.trace) {
      row.trace = strategy->trace().to_string();
      if (!strategy->plan_summary().empty()) row.trace = "plan: " + strategy->plan_summary() + "\n" + row.trace;
    }  // the measured step's, before any other
    if (!row.exact) {  // a second, unmeasured step that keeps the true inputs to compare
      strategy->set_verify(true);
      forward_backward(model, params, batch, step_options(run, strategy.get()));
      row.reconstruction = strategy->reconstruction();
      row.reconstruction_by_block = strategy->reconstruction_by_block();
      strategy->set_verify(false);
    }
    report.rows.push_back(std::move(row));
  }
  if (split) agree_on_comparisons(report);
  return report;
}

std::string same_as_full(const std::string& strategy, const StepResult& step, const StepResult& full,
                         ops::AttentionKernel attention) {
  if (strategy == "full" || step.offload_peak != 0 || step.activation_peak != full.activation_peak ||
      step.forward_ops != full.forward_ops)
    return "";
  if (strategy.find("attn-core") != std::string::npos && attention != ops::AttentionKernel::plain)
    return "= full here: the fused attention keeps no scores to drop";
  return "= full here: it drops, moves and recomputes nothing on this model";
}

}  // namespace remat
