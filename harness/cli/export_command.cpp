// remat export: seeded weights and batch in the docs/models.md HDF5 layout.
#include <cstdio>
#include <memory>

#include "autodiff/tensor.hpp"
#include "datasets/batch_source.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/io/output_guard.hpp"

namespace remat::cli {
namespace {

struct ExportOptions {
  ModelOptions model;
  std::string out;
  bool force = false;
};

void run_export(const ExportOptions& o) {
  const ModelSetup setup = o.model.resolve();
  check_output(o.out, FileKind::weights, {batch_source_file(o.model.data)}, o.force);
  require_step_memory(setup, o.model.run.attention, {}, 2, o.force);  // the weights and their host copy
  const auto model = models().find(setup.model).make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  initialize(params, o.model.run.seed, setup.sizes.L);
  const Batch batch = o.model.make_batch(setup.sizes);
  write_weights(o.out, setup, params, &batch);
  std::printf("wrote %s: %s %s, %lld parameters, batch [%d, %d], seed %llu\n", o.out.c_str(), setup.model.c_str(),
              setup.preset.c_str(), static_cast<long long>(params.count()), setup.sizes.B, setup.sizes.S,
              static_cast<unsigned long long>(o.model.run.seed));
}

}  // namespace

void setup_export(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand("export", "Write a model's seeded weights and a seeded batch to an HDF5 file");
  o->model.bind(*cmd);
  cmd->add_option("--out", o->out, "Output HDF5 file")->required();
  cmd->add_flag("--force", o->force, "Replace an existing file of another kind; skip the memory check");
  cmd->callback([o] { run_export(*o); });
}

namespace {
const RegisterCommand register_export(20, setup_export);
}  // namespace

}  // namespace remat::cli
