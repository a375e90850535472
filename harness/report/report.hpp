#pragma once
// `remat report`: a results file as a Markdown summary (grouped by model,
// ratios to full) and SVG plots: time against memory with the Pareto front,
// the memory timeline of one step per strategy, and the depth sweep.
#include <cstdint>
#include <string>
#include <vector>

#include "step/step.hpp"

namespace remat {

struct RunSummary {
  std::string name;  // the run's group in the file
  std::string model, strategy;  // strategy: the spec, with a fine-tuning label if any ("full (lora 8)")
  bool full = false;            // the spec is `full`: what the setting's other runs compare with
  std::string setting;  // every option but the strategy: runs compared with each other share it
  int L = 0, S = 0, B = 0;
  double step_time = 0, tokens_per_second = 0, recompute_share = 0;
  // Over full's, round by round (a matrix's interleaved timing): the median
  // ratio and half its interquartile range; 0 in files from before, where
  // the report divides the medians instead.
  Spread time_vs_full;
  std::int64_t activation = 0, predicted = 0, offload = 0;
  double copy_seconds = 0, wait_seconds = 0;  // the offload copies (0 in files from before they were timed)
  bool bitwise = false;
  std::string precision = "fp32";  // files from before mixed precision ran at fp32
  bool oom = false;  // recorded as out of memory under --mem-limit
  std::vector<double> timeline_seconds;
  std::vector<double> timeline_mb;
};

// The offload copies' cost in a few characters: "-" for none, else their
// time and the share of it that ran behind compute ("0.0041s 72%").
std::string copy_cost(double copy_seconds, double wait_seconds);

// Least-squares slope of log y against log x (a growth exponent).
double loglog_slope(const std::vector<double>& x, const std::vector<double>& y);

struct Results {
  std::vector<RunSummary> runs;
  std::vector<std::string> damaged;  // "run name: what is wrong", for runs left out
};

// Every run in a results file (UserError if it is not one). A run whose
// record is damaged (a missing or mistyped attribute, a non-finite or
// negative measure, timeline arrays of different lengths) is left out and
// listed in `damaged`, saying which run and why.
Results read_results(const std::string& path);
std::string markdown_summary(const Results& results);
// Writes the plots into `dir` (created if needed); returns the files written.
std::vector<std::string> write_plots(const std::vector<RunSummary>& runs, const std::string& dir);

}  // namespace remat
