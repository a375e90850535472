// remat strategies: the catalogue of strategies, the tags selective and a
// policy can name, and how strategies compose.
#include <cstdio>

#include "harness/cli/commands.hpp"
#include "strategies/registry.hpp"

namespace remat::cli {

void setup_strategies(CLI::App& app) {
  auto* cmd = app.add_subcommand("strategies", "List the activation-memory strategies, the tags, and how they compose");
  cmd->callback([] {
    std::printf("%-20s %-18s %-6s %s\n", "strategy", "applies to", "exact", "what it does");
    for (const auto& e : strategies().all()) {
      // A usage too wide for its column gets a line of its own, so the
      // columns stay aligned.
      const bool wide = e.usage.size() > 20;
      if (wide) std::printf("%s\n", e.usage.c_str());
      std::printf("%-20s %-18s %-6s %s\n", wide ? "" : e.usage.c_str(), e.applies_to.c_str(), e.exact ? "yes" : "no",
                  e.description.c_str());
    }
    std::printf("\ntags (what produced a saved tensor; the built-in ops'): ");
    for (const auto& t : builtin_tags()) std::printf("%s ", t.c_str());
    std::printf("\ntag groups: ");
    for (const auto& [group, tags] : tag_groups()) {
      std::printf("%s = ", group.c_str());
      for (std::size_t i = 0; i < tags.size(); ++i) std::printf("%s%s", i ? "," : "", tags[i].c_str());
      std::printf("; ");
    }
    std::printf("\n\n'all' = ");
    for (const auto& s : all_strategies()) std::printf("%s ", s.c_str());
    std::printf(
        "\n\ncompositions: A+B runs both policies, one decision per saved tensor: keep wins over recompute,\n"
        "recompute over offload (e.g. selective:attn-core+offload recomputes the attention core and offloads the\n"
        "rest). At most one part may choose checkpoint segments (every:K, per-layer, sqrt), a part that would\n"
        "decide nothing is refused (full+offload), and reversible composes with nothing.\n"
        "\nunder --tp N (tensor parallelism, docs/scale-out.md) every strategy runs on each rank's part of the\n"
        "layers, and stays bitwise full's: a recomputed block performs its all-reduces (and, under --sp, its\n"
        "all-gathers and reduce-scatters) again, counted in the estimate's recompute_comm_bytes; a strategy that\n"
        "drops the norms' outputs under --sp gathers them again in backward, as Megatron-LM always does. The\n"
        "budget: strategies under --tp plan from one profile the ranks agree on (every time the slowest rank's),\n"
        "so every rank runs the same plan. Under --ep N (expert parallelism) a recomputed block sends its rows\n"
        "to their experts' ranks and back again, counted the same way; budget: plans from one profile whose\n"
        "byte figures are the ranks' largest part by part, so the plan bounds every rank's peak (not yet in\n"
        "train, where each batch routes anew).\n");
  });
}

namespace {
const RegisterCommand register_strategies(40, setup_strategies);
}  // namespace

}  // namespace remat::cli
