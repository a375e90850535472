#pragma once
// One file per subcommand: its setup binds the options and the action, and
// the file registers it here, so that adding a command is its file and a
// line in harness/CMakeLists.txt.
#include <CLI/CLI.hpp>
#include <vector>

namespace remat::cli {

struct Command {
  int order;                    // where `remat --help` lists it
  void (*setup)(CLI::App& app);  // adds the subcommand to the app
};

// The registered commands, in their order.
std::vector<Command> commands();

// A command file's registration: `const RegisterCommand register_time(80, setup_time);`
// (a name of its own: the CUDA build compiles the command files as one unit).
struct RegisterCommand {
  RegisterCommand(int order, void (*setup)(CLI::App& app));
};

}  // namespace remat::cli
