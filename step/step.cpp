#include "step/step.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/error.hpp"

#include "autodiff/memory_tracker.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "autodiff/transfer.hpp"
#include "autodiff/backend.hpp"
#include "autodiff/elementwise.hpp"
#include "comm/comm.hpp"
#include "step/step_scope.hpp"

namespace remat {

void record_loss_details(const LossTerms& terms, StepResult& r) {
  for (const auto& [name, t] : terms.parts) r.loss_parts.emplace_back(name, t.item());
  for (const auto& [name, t] : terms.stats) r.stats.push_back({name, t.shape(), t.to_host_f64()});
}

namespace {

// The step itself, into r's loss, parts and statistics; the caller has
// zeroed the gradients.
void run_forward_backward(const Model& model, const ParamStore& params, const Batch& batch, const StepOptions& o,
                          StepResult& r) {
  ops::AttentionKernelScope kernel(o.attention);  // forward and backward (recomputation included)
  PrecisionScope precision(params, o.precision);  // the 16-bit weights live until backward ends
  LossTerms terms;
  {
    MemoryPhase phase("forward");
    if (o.strategy) {
      o.strategy->begin_step();
      BlockRunnerScope runner(*o.strategy);
      terms = model.loss_terms(params, batch);
    } else {
      terms = model.loss_terms(params, batch);
    }
  }
  r.loss = terms.total.item();
  record_loss_details(terms, r);
  // Backward needs only the total: the parts and statistics go now, not at its end.
  const Tensor loss = terms.total;
  terms = LossTerms{};
  r.loss_scale = o.loss_scale > 0 ? o.loss_scale : default_loss_scale(o.precision);
  {
    MemoryPhase phase("backward");
    Tensor seed = Tensor::empty(loss.shape(), loss.dtype(), "grad_loss");
    fill(seed, r.loss_scale);
    backward(loss, seed);
  }
  if (r.loss_scale != 1 && !o.keep_scaled) {
    // Unscaling an accumulated sum here would divide the earlier
    // micro-batches' share again: a caller accumulating keeps it scaled.
    if (!o.zero_grad) throw std::logic_error("run_step: unscaling gradients added to others (set keep_scaled)");
    for (const auto& p : params.tensors())
      if (const Tensor g = p.grad(); g.defined()) scale_inplace(g, 1.0 / r.loss_scale);
  }
}

// REMAT_LEFT_BEHIND=1: after each step, what it allocated that is still
// live, by label and the phase that made it, on stderr (a debugging aid for
// a step whose memory outlives it).
bool report_left_behind() {
  static const bool on = [] {
    const char* v = std::getenv("REMAT_LEFT_BEHIND");
    return v && std::string(v) == "1";
  }();
  return on;
}

void print_left_behind(const std::string& pool) {
  std::map<std::pair<std::string, std::string>, std::pair<int, std::int64_t>> groups;
  for (const auto& a : MemoryTracker::instance().ledger())
    if (a.pool == pool) {
      auto& g = groups[{a.phase, a.label}];
      ++g.first;
      g.second += a.bytes;
    }
  std::fprintf(stderr, "left behind by the step:%s\n", groups.empty() ? " nothing" : "");
  for (const auto& [key, g] : groups)
    std::fprintf(stderr, "  %-36s %-28s x%-4d %lld bytes\n", key.first.c_str(), key.second.c_str(), g.first,
                 static_cast<long long>(g.second));
}

}  // namespace

StepResult forward_backward_result(const Model& model, const ParamStore& params, const Batch& batch,
                                   const StepOptions& o) {
  if (o.zero_grad) params.zero_grad();
  StepResult r;
  const StepScope scope(o.seed, o.step);
  run_forward_backward(model, params, batch, o, r);
  return r;
}

double forward_backward(const Model& model, const ParamStore& params, const Batch& batch, const StepOptions& o) {
  return forward_backward_result(model, params, batch, o).loss;
}

void require_finite_result(double loss, const ParamStore& params) {
  std::string first;
  std::vector<float> scratch;  // where a gradient is copied to be read (none in host memory)
  for (std::size_t i = 0; i < params.tensors().size() && first.empty(); ++i) {
    const Tensor g = params.tensors()[i].grad();
    if (!g.defined()) continue;
    const float* v = g.host_f32(scratch);
    if (!std::all_of(v, v + g.numel(), [](float x) { return std::isfinite(x); })) first = params.names()[i];
  }
  if (std::isfinite(loss) && first.empty()) return;
  char value[32];
  std::snprintf(value, sizeof value, "%g", loss);
  throw UserError(std::string("the step's result is not finite: loss ") + value +
                  (first.empty() ? ", every gradient finite" : ", first non-finite gradient '" + first + "'") +
                  " (overflow from the weights or the learning rate?)");
}

double median(std::vector<double> seconds) {
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  return n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
}

Spread spread_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const auto quantile = [&](double q) {
    const double at = q * double(values.size() - 1);
    const std::size_t below = std::size_t(at);
    const double above = below + 1 < values.size() ? values[below + 1] : values[below];
    return values[below] + (at - double(below)) * (above - values[below]);
  };
  return {median(values), 0.5 * (quantile(0.75) - quantile(0.25))};
}

StepOptions step_options(const RunSettings& run, Strategy* strategy, std::uint64_t step) {
  StepOptions o;
  o.strategy = strategy;
  o.seed = run.seed;
  o.step = step;
  o.attention = run.attention;
  o.precision = run.precision;
  return o;
}

StepResult run_step(const Model& model, const ParamStore& params, const Batch& batch, const StepOptions& o) {
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  if (o.zero_grad) params.zero_grad();  // allocates the gradients before the baseline is read
  ExecSpace().fence();
  const auto base = tracker.stats(pool).live;
  const auto base_offload = offload_pool_bytes().live;
  StepResult r;
  if (report_left_behind()) tracker.start_ledger();
  {
    const StepScope scope(o.seed, o.step);  // this step's peaks, counts, copy times and dropout stream
    if (o.timeline) tracker.start_timeline();
    const auto t0 = std::chrono::steady_clock::now();
    run_forward_backward(model, params, batch, o, r);
    ExecSpace().fence();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.timeline) {
      tracker.stop_timeline();
      const auto phases = tracker.phases();
      for (const auto& e : tracker.timeline())
        if (e.pool == pool) r.timeline.push_back({e.seconds, e.live - base, phases[std::size_t(e.phase)]});
    }
    r.activation_peak = tracker.stats(pool).peak - base;
    r.offload_peak = offload_pool_bytes().peak - base_offload;
    r.weight_copy_bytes = tracker.stats(ParamStore::kCopyPool).peak;
    r.offload_copy_seconds = transfer::copy_times().copy_seconds;
    r.offload_wait_seconds = transfer::copy_times().wait_seconds;
    r.flops = stats::counts().flops;
    r.recompute_flops = stats::counts().recompute_flops;
    r.comm_bytes = stats::counts().comm_bytes;
    r.recompute_comm_bytes = stats::counts().recompute_comm_bytes;
    r.dequantize_flops = stats::counts().dequantize_flops;
    r.recompute_dequantize_flops = stats::counts().recompute_dequantize_flops;
    r.dequantize_seconds = stats::counts().dequantize_seconds;
    r.recompute_dequantize_seconds = stats::counts().recompute_dequantize_seconds;
    r.forward_ops = stats::counts().forward;
    r.recomputed_ops = stats::counts().recomputed;
    for (const auto& [name, figures] : tracker.all_stats()) r.pool_peaks[name] = figures.peak;
  }
  if (report_left_behind()) {
    ExecSpace().fence();
    print_left_behind(pool);
    tracker.stop_ledger();
  }
  // A budget is a promise: a plan that broke it is a bug, never a quiet number.
  if (o.strategy && o.strategy->activation_budget() > 0 && r.activation_peak > o.strategy->activation_budget())
    throw std::logic_error("strategy '" + o.strategy->spec() + "' measured an activation peak of " +
                           std::to_string(r.activation_peak) + " bytes, over its budget of " +
                           std::to_string(o.strategy->activation_budget()));
  return r;
}

bool within_limit(std::int64_t limit, const std::function<void()>& fn) {
  try {
    MemoryLimitScope scope(limit);
    fn();
  } catch (const OutOfMemory&) {  // over --mem-limit
    current_tape().clear();
    return false;
  } catch (const std::bad_alloc&) {  // the device (or the host) itself is full: the same for the report
    current_tape().clear();
    return false;
  }
  return true;
}

void sum_gradients_over_ranks(const ParamStore& params, comm::Group group) {
  for (const Tensor& p : params.tensors())
    if (const Tensor g = p.grad(); g.defined()) backend::upload(g, comm::sum_in_rank_order(g.to_host_f32(), group));
}

}  // namespace remat
