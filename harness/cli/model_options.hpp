#pragma once
// The options that pick a model and its sizes, shared by the subcommands.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "autodiff/ops/ops.hpp"
#include "step/step.hpp"
#include "weights/weights_file.hpp"
#include "finetune/fine_tuning.hpp"
#include "finetune/freeze.hpp"
#include "harness/tensor_layout.hpp"

namespace remat::pipeline {
struct PipelineSettings;
}

namespace remat::cli {

struct ModelOptions {
  std::string model = "gpt2";
  std::string preset = "tiny";
  std::string config;  // a published configuration (zoo/configs.hpp), instead of a preset
  int layers = 0, seq = 0, batch = 0, experts = 0, top_k = 0;  // 0: the preset's
  RunSettings run;               // --seed, --attention, --precision
  std::string data = "random";  // batch source (datasets/batch_source.hpp)
  double router_aux = 0.01;  // mixtral's load-balancing loss weight
  // --weights (where a command takes it): the model, its sizes and its
  // weights from a file, a remat HDF5 file or a Hugging Face model folder;
  // --seq and --batch still apply, --model, --preset and --layers are the file's.
  std::string weights;
  int tp = 1;       // --tp (where a command takes it): tensor-parallel ranks (harness/tensor_layout.hpp)
  bool sp = false;  // --sp: sequence parallelism in the tensor-parallel group
  int ep = 1;       // --ep: expert-parallel ranks (zoo/expert_parallel.hpp)
  int cp = 1;       // --cp: context-parallel ranks (zoo/context_parallel.hpp)
  RankLayout layout() const { return {tp, sp, ep, cp}; }

  void bind(CLI::App& cmd);
  // bind() and --weights.
  void bind_with_weights(CLI::App& cmd);
  // The first batch of the --data source for these sizes.
  Batch make_batch(const Sizes& sizes) const;
  // The model, preset and sizes these options name (validated); with
  // --weights, the file's, with --seq and --batch applied.
  ModelSetup resolve() const;
  // The weights: the file's with --weights, else initialised from --seed.
  std::unique_ptr<ParamStore> make_params(const ModelSetup& setup, bool force) const;

 private:
  std::vector<const CLI::Option*> decided_by_weights_;  // --model, --preset, --layers, --config, --experts, --top-k
};

// --seed, --attention and --precision into `run`: the one way a command
// takes them (typed here, at the edge; bad values refused in one line).
void add_run_options(CLI::App& cmd, RunSettings& run, const std::string& seed_help);
// --attention fused|fused-team|plain.
void add_attention_option(CLI::App& cmd, ops::AttentionKernel& kernel);
// --precision fp32|bf16|fp16.
void add_precision_option(CLI::App& cmd, Precision& precision);
// --precisions fp32,bf16,...: an axis.
void add_precisions_option(CLI::App& cmd, std::vector<Precision>& precisions, const std::string& help);
// At bf16 and fp16, one line on where this build's 16-bit GEMMs run (on a
// CPU without 16-bit arithmetic: correct, not faster); nothing at fp32.
void print_precision_path(Precision precision);
// --router-aux A: the weight of a mixture of experts' load-balancing loss.
void add_router_aux_option(CLI::App& cmd, double& weight);
// --freeze PATTERN[,PATTERN...] and --freeze-below N.
void add_freeze_options(CLI::App& cmd, FreezeOptions& freeze);
// --lora R, --lora-alpha A, --lora-targets PATTERN,...
void add_lora_options(CLI::App& cmd, LoraOptions& lora);
// --quantize nf4|int8: the frozen linear weights' format.
void add_quantize_option(CLI::App& cmd, QuantFormat& format, const std::string& help = "");
// With --quantize nf4 and no --precision (or --precisions), a step computes
// in bf16, as QLoRA does: set once `cmd` is parsed (both options bound on it).
void quantized_precision_default(CLI::App& cmd, const QuantFormat& format, Precision& precision);
void quantized_precision_default(CLI::App& cmd, const QuantFormat& format, std::vector<Precision>& precisions);
// The three above, into one FineTuning.
void add_fine_tuning_options(CLI::App& cmd, FineTuning& finetune);
// Applies --lora (a store with the adapters, every base parameter frozen,
// each adapter checked to serve a linear on `batch`), --freeze and
// --quantize, and says what it did on stdout unless `quiet`.
void fine_tune(std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch, const FineTuning& finetune,
               std::uint64_t seed, const ModelSetup& setup, bool quiet = false);

// --tp N: tensor parallelism over the job's N ranks; --sp: sequence parallelism with it.
void add_tp_options(CLI::App& cmd, int& tp, bool& sp);
void add_ep_option(CLI::App& cmd, int& ep);
// --cp N: context parallelism (the sequence split over N ranks).
void add_cp_option(CLI::App& cmd, int& cp);
// --pp, --micro-batches, --schedule, --stage-layers (pipeline/schedule.hpp).
// train, whose --schedule is the learning rate's and whose --accumulate is
// M, takes --pp, --pp-schedule and --stage-layers (`for_training`).
void add_pipeline_options(CLI::App& cmd, pipeline::PipelineSettings& p, bool for_training = false);

// --seed, validated.
void add_seed_option(CLI::App& cmd, std::uint64_t& seed, const std::string& help);

// Refuses (UserError) a step of `setup` under `strategies` that would not
// fit in memory, holding `parameter_copies` copies of the weights (weights,
// gradients, reference gradients...), unless `force`.
// Returns the estimate (bytes).
std::int64_t require_step_memory(const ModelSetup& setup, ops::AttentionKernel kernel,
                                 const std::vector<std::string>& strategies, int parameter_copies, bool force);

}  // namespace remat::cli
