#pragma once
// One file per subcommand: setup_X binds its options and its action.
#include <CLI/CLI.hpp>

namespace remat::cli {

void setup_models(CLI::App& app);
void setup_export(CLI::App& app);
void setup_grads(CLI::App& app);
void setup_check(CLI::App& app);
void setup_strategies(CLI::App& app);
void setup_matrix(CLI::App& app);
void setup_report(CLI::App& app);
void setup_time(CLI::App& app);
void setup_train(CLI::App& app);
void setup_plan(CLI::App& app);
void setup_lora_merge(CLI::App& app);
void setup_merge(CLI::App& app);
void setup_import(CLI::App& app);
void setup_export_hf(CLI::App& app);
void setup_estimate(CLI::App& app);

}  // namespace remat::cli
