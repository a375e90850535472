// remat: the command-line tool. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <stdexcept>

#include "autodiff/error.hpp"
#include "autodiff/runtime.hpp"
#include "harness/cli/commands.hpp"

int main(int argc, char** argv) {
  remat::Runtime runtime(argc, argv);
  CLI::App app{"remat: activation-memory strategies for transformer training, measured and proven exact"};
  app.require_subcommand(1);
  app.footer(
      "Kokkos options pass through, e.g. --kokkos-num-threads=N (threads), --kokkos-help.\n"
      "Errors in what was asked (a bad file, name or shape) exit with code 2.");
  remat::cli::setup_models(app);
  remat::cli::setup_export(app);
  remat::cli::setup_grads(app);
  remat::cli::setup_strategies(app);
  remat::cli::setup_check(app);
  remat::cli::setup_matrix(app);
  remat::cli::setup_report(app);
  remat::cli::setup_time(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own failure, already reported
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "remat: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const remat::UserError& e) {
    std::fprintf(stderr, "remat: error: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {  // an op refused its input (e.g. a token id out of range)
    std::fprintf(stderr, "remat: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remat: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
