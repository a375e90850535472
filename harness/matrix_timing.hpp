#pragma once
// The timed steps of one shape's strategies, interleaved. Every strategy
// warms up, then each round runs one step of each, the order rotated by one
// a round: drift (a warming cache, clocks, a busy neighbour) falls on all of
// them alike, and each round's ratio to `full` compares steps taken side by
// side. Rounds go on past the minimum until every strategy's ratio to full
// is known within the spread asked for, or the cap.
#include <functional>
#include <string>
#include <vector>

#include "harness/io/results_file.hpp"
#include "step/step.hpp"

namespace remat {

struct SaveProfile;

struct TimingOptions {
  int warmup = 1;
  int min_rounds = 3;      // --steps
  int max_rounds = 6;      // --max-steps
  double spread = 0.02;    // --spread: half-IQR of the per-round ratios, relative to their median
  std::int64_t mem_limit = 0;
};

// What the rounds run on: one model, weights and batch, and the probe the
// planned strategies plan from (null if none is planned).
struct TimingShape {
  const Model& model;
  const ParamStore& params;
  const Batch& batch;
  RunSettings run;
  const SaveProfile* costs = nullptr;
};

// A step's loss (or a part or statistic of it) as a record holds it: under
// context parallelism each rank's is its rows' share, so the group's sum (a
// collective); as it is otherwise.
double whole_loss(const Model& model, double loss);

// Times every record's strategy (records already out of memory are left
// alone; one that runs out here is marked so): fills step_times, losses,
// time_vs_full and timing_capped. `say(record, what)` reports progress.
void time_interleaved(const TimingOptions& o, const TimingShape& shape, std::vector<RunRecord*> records,
                      const std::function<void(const RunRecord&, const std::string&)>& say);

}  // namespace remat
