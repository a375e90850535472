#pragma once
// `remat report` for training runs: a Markdown summary of each run and one
// plot of their loss curves (training, and validation dashed), overlaid.
#include <string>
#include <vector>

namespace remat {

std::string training_summary(const std::vector<std::string>& run_files);
// Writes loss.svg into `dir`; returns the file written.
std::string write_loss_plot(const std::vector<std::string>& run_files, const std::string& dir);
// Writes ranks.svg into `dir`: each run's memory per rank (parameters,
// gradients, optimizer state, gathered parameters and activations) against
// its median step time and against its communication per step; returns the
// file written.
// "" (and no file) when no run has more than one rank.
std::string write_rank_plot(const std::vector<std::string>& run_files, const std::string& dir);
// Writes experts.svg into `dir` if a run routes tokens to experts (mixtral):
// for each such run and layer, each expert's share of the routed rows over
// the steps; returns the file written, or "" if no run has experts.
std::string write_expert_plot(const std::vector<std::string>& run_files, const std::string& dir);
// Writes pipeline.svg into `dir` for the first run trained under --pp: its
// last step's passes per stage over time and each stage's memory beneath
// (harness/report/pipeline_chart.hpp); "" if no run has them.
std::string write_pipeline_plot(const std::vector<std::string>& run_files, const std::string& dir);

}  // namespace remat
