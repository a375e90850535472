#include "harness/cli/commands.hpp"

#include <algorithm>

namespace remat::cli {
namespace {

// Filled while the command files' registrations are constructed, before
// main: a function's static, so that it exists before the first of them.
std::vector<Command>& registry() {
  static std::vector<Command> all;
  return all;
}

}  // namespace

RegisterCommand::RegisterCommand(int order, void (*setup)(CLI::App& app)) { registry().push_back({order, setup}); }

std::vector<Command> commands() {
  std::vector<Command> all = registry();
  std::sort(all.begin(), all.end(), [](const Command& a, const Command& b) { return a.order < b.order; });
  return all;
}

}  // namespace remat::cli
