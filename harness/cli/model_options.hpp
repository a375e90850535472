#pragma once
// The options that pick a model and its sizes, shared by the subcommands.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "harness/io/weights_file.hpp"

namespace remat::cli {

struct ModelOptions {
  std::string model = "gpt2";
  std::string preset = "tiny";
  int layers = 0, seq = 0, batch = 0;  // 0: the preset's
  std::uint64_t seed = 1;

  void bind(CLI::App& cmd);
  // The model, preset and sizes these options name (validated).
  ModelSetup resolve() const;
};

}  // namespace remat::cli
