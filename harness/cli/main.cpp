// remat: the command-line tool. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/blas_kernels.hpp"
#include "autodiff/runtime.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/validators.hpp"

namespace {

// The arguments with what ranks on one machine need by default: a share of
// its cores each, and Kokkos' warnings (oversubscribed cores, say) printed
// once, by rank 0. `threads` and `quiet` hold the added words.
std::vector<char*> with_rank_defaults(int argc, char** argv, std::string& threads, std::string& quiet) {
  std::vector<char*> args(argv, argv + argc);
  if (remat::comm::local_size() > 1 &&
      std::none_of(args.begin(), args.end(), [](const char* a) { return std::strstr(a, "--kokkos-threads") == a || std::strstr(a, "--kokkos-num-threads") == a; })) {
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    threads = "--kokkos-num-threads=" + std::to_string(std::max(1L, cores / remat::comm::local_size()));
    args.push_back(threads.data());
  }
  quiet = "--kokkos-disable-warnings";
  if (remat::comm::rank() > 0 &&
      std::none_of(args.begin(), args.end(), [](const char* a) { return std::strstr(a, "--kokkos-disable-warnings"); }))
    args.push_back(quiet.data());
  return args;
}

int run(int argc, char** argv) {
  // --version answers without initialising Kokkos (and so without a device).
  for (int i = 1; i < argc && argv[i][0] == '-'; ++i)
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s\n", remat::Runtime::version().c_str());
      return 0;
    }
  std::string threads, quiet;
  std::vector<char*> args = with_rank_defaults(argc, argv, threads, quiet);
  argc = int(args.size());
  argv = args.data();
  remat::Runtime runtime(argc, argv);
  CLI::App app{"remat: activation-memory strategies for transformer training, measured and proven exact"};
  app.require_subcommand(1);
  app.set_version_flag("--version", remat::Runtime::version());  // listed in --help; answered above
  app.footer(
      "Kokkos options pass through, e.g. --kokkos-num-threads=N (threads), --kokkos-help.\n"
      "Exit codes: 0 success, 1 a check failed (gradients differ, golden drift), 2 an error in what was asked\n"
      "(a bad file, name, option or size; a full disk; too little memory), 3 an internal error (a bug: please report),\n"
      "4 the environment failed (HDF5, MPI, CUDA or cuBLAS refused work that was well asked).");
  for (const auto& command : remat::cli::commands()) command.setup(app);
  remat::cli::check_every_option(app);
  try {
    remat::cli::refuse_empty_list_items(app, std::vector<std::string>(argv + 1, argv + argc));
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own failure, already reported
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same words: rank 0 speaks for all.
    if (remat::comm::rank() > 0) return e.get_exit_code() == 0 ? 0 : 2;
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "remat: error: %s (see --help)\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace

// One failure, reported once. Under MPI, when every rank failed alike (an
// error in what was asked: each rank checks the same options and files),
// rank 0 alone says it and the job ends in order with the exit code; when
// one rank alone failed, it says so with its rank and stops the others,
// which would otherwise wait for it forever.
int fail(int code, const char* kind, const std::string& message) {
  namespace comm = remat::comm;
  if (comm::size() == 1) {
    std::fprintf(stderr, "remat: %s: %s\n", kind, message.c_str());
    return code;
  }
  if (comm::every_rank_failed(10.0)) {
    if (comm::rank() == 0) std::fprintf(stderr, "remat: %s: %s\n", kind, message.c_str());
    return code;
  }
  std::fprintf(stderr, "remat: %s (rank %d, the others stopped): %s\n", kind, comm::rank(), message.c_str());
  std::fflush(stderr);
  comm::abort_all(code);
}

int main(int argc, char** argv) {
  remat::blas::use_native_kernels(argv);  // may start the program again: before MPI starts
  remat::comm::Session comm(argc, argv);  // outlives run(): an error may still have to stop the other ranks
  try {
    return run(argc, argv);
  } catch (const remat::UserError& e) {
    return fail(remat::kExitUserError, "error", e.what());
  } catch (const remat::EnvironmentError& e) {
    return fail(remat::kExitEnvironment, "environment error", e.what());
  } catch (const remat::AllocationFailure& e) {
    return fail(remat::kExitUserError, "error",
                std::string(e.what()) + "; try smaller sizes or a strategy that keeps less");
  } catch (const std::bad_alloc&) {
    return fail(remat::kExitUserError, "error", "out of memory (try smaller sizes or a strategy that keeps less)");
  } catch (const std::exception& e) {
    return fail(remat::kExitInternalError, "internal error", e.what());
  }
}
