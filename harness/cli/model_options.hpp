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
  std::string data = "random";  // batch source (datasets/batch_source.hpp)
  std::string attention = "fused";  // attention kernel (ops::AttentionKernel)

  void bind(CLI::App& cmd);
  // The first batch of the --data source for these sizes.
  Batch make_batch(const Sizes& sizes) const;
  // The model, preset and sizes these options name (validated).
  ModelSetup resolve() const;
};

// --attention fused|plain: sets the kernel the attention ops use.
void add_attention_option(CLI::App& cmd, std::string& kernel);

}  // namespace remat::cli
