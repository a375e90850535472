// remat grads: loss and gradients of one forward/backward on a weight file.
#include <cstdio>
#include <memory>

#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "datasets/batch_source.hpp"
#include "harness/io/weights_file.hpp"
#include "harness/step.hpp"
#include "strategies/registry.hpp"

namespace remat::cli {
namespace {

struct GradsOptions {
  std::string weights;
  std::string out;
  std::uint64_t seed = 1;
  std::string strategy = "full";
  std::string data;  // overrides the file's batch
  std::string attention = "fused";
};

void run_grads(const GradsOptions& o) {
  LoadedWeights w = load_weights(o.weights);
  const Sizes& z = w.setup.sizes;
  if (!o.data.empty()) {
    w.batch = make_batch_source(o.data, z.B, z.S, z.V, o.seed)->next();
  } else if (!w.batch) {
    std::printf("%s has no /batch: using a random batch [%d, %d] with seed %llu\n", o.weights.c_str(), z.B, z.S,
                static_cast<unsigned long long>(o.seed));
    w.batch = random_batch(z.B, z.S, z.V, o.seed);
  }
  auto strategy = make_strategy(o.strategy);
  const double loss = forward_backward(*w.model, *w.params, *w.batch, {strategy.get(), o.seed, 0});
  if (!o.out.empty()) write_gradients(o.out, w.setup, *w.params, loss);
  std::printf("loss %.9g\n", loss);
  if (!o.out.empty()) std::printf("wrote %s: /loss and /grads for %zu parameters\n", o.out.c_str(), w.params->names().size());
}

}  // namespace

void setup_grads(CLI::App& app) {
  auto o = std::make_shared<GradsOptions>();
  auto* cmd = app.add_subcommand("grads", "Run one forward and backward on a weight file; write loss and gradients");
  cmd->add_option("--weights", o->weights, "HDF5 weight file (MODELS.md layout)")->required();
  cmd->add_option("--out", o->out, "Output HDF5 file for /loss and /grads/<name>");
  cmd->add_option("--seed", o->seed, "Seed of the batch (when the file carries none) and of dropout")
      ->capture_default_str();
  add_attention_option(*cmd, o->attention);
  cmd->add_option("--data", o->data, "Batch source instead of the file's batch (see `remat check --help`)");
  cmd->add_option("--strategy", o->strategy, "Activation-memory strategy (see `remat strategies`)")
      ->capture_default_str();
  cmd->callback([o] { run_grads(*o); });
}

}  // namespace remat::cli
