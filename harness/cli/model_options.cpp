#include "harness/cli/model_options.hpp"

#include "autodiff/ops/ops.hpp"
#include "datasets/batch_source.hpp"

namespace remat::cli {

void ModelOptions::bind(CLI::App& cmd) {
  cmd.add_option("--model", model, "Model from the zoo")->check(CLI::IsMember(models().names()))->capture_default_str();
  cmd.add_option("--preset", preset, "Size preset")->check(CLI::IsMember(preset_names()))->capture_default_str();
  cmd.add_option("--layers", layers, "Override the preset's number of blocks L")->check(CLI::PositiveNumber);
  cmd.add_option("--seq", seq, "Override the preset's sequence length S")->check(CLI::PositiveNumber);
  cmd.add_option("--batch", batch, "Override the preset's batch size B")->check(CLI::PositiveNumber);
  cmd.add_option("--seed", seed, "Seed of the initialisation and the batch")->capture_default_str();
  cmd.add_option("--data", data, "Batch source: random, copy, reverse, text:PATH, h5:PATH[:DATASET]")
      ->capture_default_str();
  add_attention_option(cmd, attention);
}

void add_attention_option(CLI::App& cmd, std::string& kernel) {
  cmd.add_option("--attention", kernel,
                 "Attention kernel: fused (keeps output and log-sum-exp, recomputes probabilities in backward) or "
                 "plain (keeps the probabilities)")
      ->check(CLI::IsMember({"fused", "plain"}))
      ->capture_default_str()
      ->each([](const std::string& k) { ops::set_attention_kernel(ops::parse_attention_kernel(k)); });
}

Batch ModelOptions::make_batch(const Sizes& z) const { return make_batch_source(data, z.B, z.S, z.V, seed)->next(); }

ModelSetup ModelOptions::resolve() const {
  ModelSetup s{model, preset, preset_sizes(preset)};
  if (layers) s.sizes.L = layers;
  if (seq) s.sizes.S = s.sizes.S_max = seq;
  if (batch) s.sizes.B = batch;
  validate(s.sizes);
  models().find(model);
  return s;
}

}  // namespace remat::cli
