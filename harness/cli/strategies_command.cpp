// remat strategies: the catalogue of strategies and how they compose.
#include <cstdio>

#include "harness/cli/commands.hpp"
#include "strategies/registry.hpp"

namespace remat::cli {

void setup_strategies(CLI::App& app) {
  auto* cmd = app.add_subcommand("strategies", "List the activation-memory strategies");
  cmd->callback([] {
    std::printf("%-20s %-18s %s\n", "strategy", "applies to", "what it does");
    for (const auto& s : strategy_catalog())
      std::printf("%-20s %-18s %s\n", s.spec.c_str(), s.applies_to.c_str(), s.description.c_str());
    std::printf("\n'all' = ");
    for (const auto& s : all_strategies()) std::printf("%s ", s.c_str());
    std::printf("\ncompositions: every:K, per-layer, sqrt and selective[:kinds] take '+offload';\n"
                "full, offload and offload-checkpoint take none.\n");
  });
}

}  // namespace remat::cli
