// remat: the command-line tool. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

#include "autodiff/error.hpp"
#include "autodiff/runtime.hpp"
#include "harness/cli/commands.hpp"

namespace {

int run(int argc, char** argv) {
  // --version answers without initialising Kokkos (and so without a device).
  for (int i = 1; i < argc && argv[i][0] == '-'; ++i)
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s\n", remat::Runtime::version().c_str());
      return 0;
    }
  remat::Runtime runtime(argc, argv);
  CLI::App app{"remat: activation-memory strategies for transformer training, measured and proven exact"};
  app.require_subcommand(1);
  app.set_version_flag("--version", remat::Runtime::version());  // listed in --help; answered above
  app.footer(
      "Kokkos options pass through, e.g. --kokkos-num-threads=N (threads), --kokkos-help.\n"
      "Exit codes: 0 success, 1 a check failed (gradients differ, golden drift), 2 an error in what was asked\n"
      "(a bad file, name, option or size; a full disk; too little memory), 3 an internal error (a bug: please report).");
  remat::cli::setup_models(app);
  remat::cli::setup_export(app);
  remat::cli::setup_grads(app);
  remat::cli::setup_strategies(app);
  remat::cli::setup_check(app);
  remat::cli::setup_matrix(app);
  remat::cli::setup_report(app);
  remat::cli::setup_time(app);
  remat::cli::setup_train(app);
  remat::cli::setup_plan(app);
  remat::cli::setup_lora_merge(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own failure, already reported
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "remat: error: %s (see --help)\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const remat::UserError& e) {
    std::fprintf(stderr, "remat: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "remat: error: out of memory (try smaller sizes or a strategy that keeps less)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remat: internal error: %s\n", e.what());
    return 3;
  }
}
