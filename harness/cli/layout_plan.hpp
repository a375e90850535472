#pragma once
// `remat plan --gpus G`: the layout planner's options and its rendering
// (the search is harness/layout_search.hpp's).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace remat::cli {

struct ModelOptions;

struct LayoutPlanOptions {
  int gpus = 0;  // 0: not asked (plan plans a budget)
  int gpus_per_node = 8;
  std::int64_t global_batch = std::int64_t(1) << 22;
  std::string strategies = "full,selective,per-layer,offload-checkpoint";
  int top = 5;
  std::vector<const CLI::Option*> only_with_gpus;  // the four above: refused without --gpus
};

// --gpus, --gpus-per-node, --global-batch, --layout-strategies, --top on `cmd`.
void add_layout_plan_options(CLI::App& cmd, LayoutPlanOptions& o);
// Refuses (UserError) the layout options without --gpus, and with it the
// budget planner's own options (`plan_options_given`).
void refuse_layout_options(const LayoutPlanOptions& o, bool plan_options_given);
// Searches the layouts and prints them (text, or JSON with `json`).
void run_layout_plan(const LayoutPlanOptions& o, const ModelOptions& model, const std::string& device, bool json);

}  // namespace remat::cli
