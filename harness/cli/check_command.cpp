// remat check: every strategy against `full` on the same weights and batch:
// loss, gradient error, bitwise equality, measured and predicted activation
// memory, recomputed FLOPs. Exit 1 if an exact strategy is not bitwise equal.
#include <cstdio>
#include <memory>

#include "autodiff/runtime.hpp"
#include "harness/check.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "strategies/registry.hpp"
#include "strategies/trace.hpp"

namespace remat::cli {
namespace {

struct CheckOptions {
  ModelOptions model;
  std::string weights;
  std::string strategies = "all";
  double dropout = 0;
  bool trace = false;
  bool data_given = false;  // --data overrides a weight file's batch
};

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1 << 20));
  return buf;
}

int run_check_command(const CheckOptions& o) {
  ModelSetup setup;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamStore> params;
  Batch batch;
  if (!o.weights.empty()) {
    LoadedWeights w = load_weights(o.weights);
    setup = w.setup;
    if (!w.batch || o.data_given) w.batch = o.model.make_batch(setup.sizes);
    batch = *w.batch;
    params = std::move(w.params);
  } else {
    setup = o.model.resolve();
    params = std::make_unique<ParamStore>(models().find(setup.model).make(setup.sizes)->params(), DType::f32);
    initialize(*params, o.model.seed, setup.sizes.L);
    batch = o.model.make_batch(setup.sizes);
  }
  setup.sizes.dropout = o.dropout;
  validate(setup.sizes);
  model = models().find(setup.model).make(setup.sizes);
  const auto specs = strategies_for(setup.model, o.strategies);

  const Sizes& z = setup.sizes;
  std::printf("remat check: %s %s (L %d, D %d, H %d, S %d, B %d), dropout %g, %s\n", setup.model.c_str(),
              setup.preset.c_str(), z.L, z.D, z.H, z.S, z.B, z.dropout, Runtime::describe().c_str());
  const CheckReport report = run_check(*model, *params, batch, specs, {o.model.seed, o.trace});

  std::printf("\n%-28s %12s %10s %10s %7s %10s %10s %6s %9s %8s %7s\n", "strategy", "loss", "max abs", "max rel",
              "bitwise", "act MB", "pred MB", "ratio", "offl. MB", "recomp.", "time s");
  int failures = 0;
  for (const auto& r : report.rows) {
    const auto& s = r.step;
    const bool ok = !r.exact || r.vs_full.bitwise;
    failures += ok ? 0 : 1;
    std::printf("%-28s %12.8f %10.2e %10.2e %7s %10s %10s %6.3f %9s %7.1f%% %7.3f%s\n", r.strategy.c_str(), s.loss,
                r.vs_full.max_abs, r.vs_full.max_rel, r.vs_full.bitwise ? "yes" : "no",
                mb(double(s.activation_peak)).c_str(), mb(double(r.predicted.device)).c_str(),
                double(s.activation_peak) / double(report.full.activation_peak),
                mb(double(s.offload_peak)).c_str(), s.flops > 0 ? 100.0 * s.recompute_flops / s.flops : 0.0,
                s.seconds, ok ? "" : "   <- NOT BITWISE EQUAL TO full");
  }
  std::printf(
      "\nact MB: device-pool peak during the step minus what was live before it (parameters, gradients, batch);\n"
      "pred MB: predicted from one probe step (each block's saved bytes and working set) by the strategy's plan;\n"
      "ratio: act / full's; "
      "offl. MB: offload-pool peak; recomp.: share of the step's GEMM FLOPs spent recomputing.\n");
  for (const auto& r : report.rows)
    if (r.reconstruction)
      std::printf("%s: reconstruction of block inputs, worst block %s: max abs %.3e, max rel %.3e; gradients vs full: "
                  "max rel %.3e (%s)\n",
                  r.strategy.c_str(), r.reconstruction->block.c_str(), r.reconstruction->max_abs,
                  r.reconstruction->max_rel, r.vs_full.max_rel, r.vs_full.worst.c_str());
  for (const auto& r : report.rows)
    if (!r.trace.empty()) std::printf("\n== trace: %s ==\n%s", r.strategy.c_str(), r.trace.c_str());
  if (failures) std::fprintf(stderr, "remat check: %d exact strategies are not bitwise equal to full\n", failures);
  return failures ? 1 : 0;
}

}  // namespace

void setup_check(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  auto* cmd = app.add_subcommand("check", "Check every strategy's gradients and memory against full, one step each");
  o->model.bind(*cmd);
  cmd->add_option("--weights", o->weights, "Take the model, sizes, weights and batch from this HDF5 file instead");
  cmd->add_option("--strategies", o->strategies, "'all' or a comma-separated list (see `remat strategies`)")
      ->capture_default_str();
  cmd->add_option("--dropout", o->dropout, "Dropout probability (masks replay exactly under recomputation)")
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_flag("--trace", o->trace, "Print, per region, the ops run and recomputed and the bytes kept/dropped/offloaded");
  cmd->callback([o, cmd] {
    o->data_given = cmd->count("--data") > 0;
    if (const int rc = run_check_command(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace remat::cli
