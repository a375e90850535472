// remat models: the zoo, with parameter counts per preset.
#include <cstdio>

#include "harness/cli/commands.hpp"
#include "strategies/registry.hpp"
#include "zoo/configs.hpp"
#include "zoo/model.hpp"

namespace remat::cli {
namespace {

std::string human(std::int64_t n) {
  char buf[32];
  if (n >= 1000000) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else if (n >= 1000) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

void run_models() {
  std::printf("%-10s %-10s %s\n", "model", "reversible", "description");
  for (const auto& m : models().all()) std::printf("%-10s %-10s %s\n", m.name.c_str(), m.reversible ? "yes" : "no", m.description.c_str());
  std::printf("\nparameters per preset:\n%-10s", "model");
  for (const auto& p : presets()) std::printf(" %11s", p.name.c_str());
  std::printf("\n");
  for (const auto& m : models().all()) {
    std::printf("%-10s", m.name.c_str());
    for (const auto& p : presets()) std::printf(" %11s", human(count_params(m.make(p.sizes)->params())).c_str());
    std::printf("\n");
  }
  std::printf("\nstrategies per model (`remat strategies` says what each does):\n");
  for (const auto& m : models().all()) {
    std::string list;
    for (const auto& st : all_strategies(ModelTraits{m.reversible})) list += (list.empty() ? "" : " ") + st;
    std::printf("%-10s %s, and compositions with +offload\n", m.name.c_str(), list.c_str());
  }
  std::printf("\nparallelism (docs/scale-out.md): --tp N splits every layer of ");
  const auto split = tensor_parallel_models();
  for (std::size_t i = 0; i < split.size(); ++i) std::printf("%s%s", i ? ", " : "", split[i].c_str());
  std::printf(" over N ranks (heads,\nhidden units and vocabulary, as Megatron-LM); --sp also splits the sequence between "
              "the split layers\n(not bert); --ep N spreads mixtral's experts over N ranks (E/N each, tokens sent to "
              "their experts'\nranks by all-to-all, the batch's sequences split); MPI data parallelism and "
              "--shard-params (ZeRO-3)\nreplicate or shard whole models.\n");
  std::string context, staged;
  for (const auto& m : models().all()) {
    if (m.context_parallel) context += (context.empty() ? "" : ", ") + m.name;
    if (m.make(preset_sizes("tiny"))->staged()) staged += (staged.empty() ? "" : ", ") + m.name;
  }
  std::printf("--cp N splits the sequence of %s over N ranks (two zig-zag chunks each, keys and values\npassed "
              "around a ring for attention); --pp N splits the layers of %s into N pipeline stages\n(activations "
              "sent forward, their gradients back, on a schedule).\n", context.c_str(), staged.c_str());
  std::printf("\npresets (L D H Hkv F S V B; E experts, K per token: mixtral):\n");
  for (const auto& p : presets()) {
    const Sizes& z = p.sizes;
    std::printf("%-10s %3d %5d %3d %3d %5d %5d %6d %2d %2d %d  %s\n", p.name.c_str(), z.L, z.D, z.H, z.Hkv, z.F, z.S,
                z.V, z.B, z.E, z.K, p.use.c_str());
  }
  std::printf("\npublished configurations (--config; L D H Hkv F S_max V; parameters counted from the shapes):\n");
  for (const auto& c : published_configs()) {
    const Sizes& z = c.sizes;
    const long long count = count_params(models().find(c.model).make(z)->params());
    std::printf("%-13s %-8s %3d %5d %3d %3d %6d %6d %6d  %lld parameters\n", c.name.c_str(), c.model.c_str(), z.L,
                z.D, z.H, z.Hkv, z.F, z.S_max, z.V, count);
  }
}

}  // namespace

void setup_models(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List the zoo's models and presets with parameter counts");
  cmd->callback(run_models);
}

namespace {
const RegisterCommand register_models(10, setup_models);
}  // namespace

}  // namespace remat::cli
