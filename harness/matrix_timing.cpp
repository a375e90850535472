#include "harness/matrix_timing.hpp"

#include <algorithm>
#include <memory>

#include "comm/comm.hpp"
#include "strategies/profile.hpp"
#include "strategies/registry.hpp"

namespace remat {
namespace {

struct TimedRun {
  RunRecord* record;
  std::unique_ptr<Strategy> strategy;
};

// A step split over ranks takes as long as its slowest rank: every rank of
// the group records that time, so that all decide alike when the rounds end.
double slowest_rank(const Model& model, double seconds) {
  if (!model.sizes().split_over_ranks()) return seconds;
  std::vector<double> all(std::size_t(comm::size(comm::Group::model)));
  comm::gather_all(&seconds, 1, all.data(), comm::Group::model);
  return *std::max_element(all.begin(), all.end());
}

}  // namespace

double whole_loss(const Model& model, double loss) {
  return model.sizes().cp.split() ? comm::sum_in_rank_order(loss, comm::Group::context) : loss;
}

namespace {

// One step of a run; false (and the run marked out of memory) past the limit.
bool step_once(const TimingOptions& o, const TimingShape& s, TimedRun& t, bool timed) {
  StepResult result;
  const StepOptions options = step_options(s.run, t.strategy.get());
  if (!within_limit(o.mem_limit, [&] { result = run_step(s.model, s.params, s.batch, options); })) {
    t.record->check.oom = true;
    return false;
  }
  if (timed) {
    t.record->step_times.push_back(slowest_rank(s.model, result.seconds));
    t.record->losses.push_back(whole_loss(s.model, result.loss));
  }
  return true;
}

// Each run's step times over full's, round by round (full's own: all 1);
// its own times where full is not among the runs (or ran out of memory).
std::vector<double> ratios(const TimedRun& t, const TimedRun* full) {
  const auto& mine = t.record->step_times;
  if (!full || full->record->check.oom) return mine;
  std::vector<double> out;
  for (std::size_t r = 0; r < mine.size() && r < full->record->step_times.size(); ++r)
    out.push_back(mine[r] / full->record->step_times[r]);
  return out;
}

bool settled(const TimingOptions& o, const std::vector<TimedRun>& runs, const TimedRun* full) {
  for (const auto& t : runs)
    if (!t.record->check.oom && spread_of(ratios(t, full)).relative() > o.spread) return false;
  return true;
}

}  // namespace

void time_interleaved(const TimingOptions& o, const TimingShape& s, std::vector<RunRecord*> records,
                      const std::function<void(const RunRecord&, const std::string&)>& say) {
  std::vector<TimedRun> runs;
  for (RunRecord* r : records) {
    if (r->check.oom) continue;
    TimedRun t{r, make_strategy(r->key.strategy)};
    if (t.strategy->needs_costs()) t.strategy->plan(*s.costs);
    runs.push_back(std::move(t));
  }
  const TimedRun* full = nullptr;
  for (const auto& t : runs)
    if (t.record->key.strategy == "full") full = &t;
  for (int w = 0; w < o.warmup; ++w)
    for (auto& t : runs)
      if (!t.record->check.oom) {
        say(*t.record, "warm-up");
        step_once(o, s, t, false);
      }
  const std::size_t n = runs.size();
  bool capped = false;
  for (int round = 0; n > 0; ++round) {
    for (std::size_t i = 0; i < n; ++i) {
      TimedRun& t = runs[(i + std::size_t(round)) % n];  // rotated: no run always first or last
      if (t.record->check.oom) continue;
      say(*t.record, "round " + std::to_string(round + 1) + " (at least " + std::to_string(o.min_rounds) +
                         ", at most " + std::to_string(o.max_rounds) + ")");
      step_once(o, s, t, true);
    }
    if (round + 1 < o.min_rounds) continue;
    if (settled(o, runs, full)) break;
    if (round + 1 >= o.max_rounds) {
      capped = true;
      break;
    }
  }
  for (const auto& t : runs) {
    t.record->timing_capped = capped;
    if (full && !full->record->check.oom && !t.record->check.oom) t.record->time_vs_full = spread_of(ratios(t, full));
  }
}

}  // namespace remat
