#pragma once
// `remat plan --gpus G`: the layout planner's options and its rendering
// (the search is harness/layout_search.hpp's).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace remat::cli {

struct ModelOptions;

struct LayoutPlanOptions {
  int gpus = 0;  // 0: not asked (plan plans a budget)
  int gpus_per_node = 8;
  std::int64_t global_batch = std::int64_t(1) << 22;
  std::string strategies = "full,selective,per-layer,offload-checkpoint";
  int top = 5;
};

// --gpus, --gpus-per-node, --global-batch, --layout-strategies, --top on `cmd`.
void add_layout_plan_options(CLI::App& cmd, LayoutPlanOptions& o);
// Searches the layouts and prints them (text, or JSON with `json`).
void run_layout_plan(const LayoutPlanOptions& o, const ModelOptions& model, const std::string& device, bool json);

}  // namespace remat::cli
