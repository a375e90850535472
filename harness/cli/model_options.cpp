#include "harness/cli/model_options.hpp"

#include "pipeline/schedule.hpp"

#include "autodiff/gemm.hpp"
#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "estimate/step_need.hpp"
#include "harness/cli/validators.hpp"
#include "zoo/configs.hpp"
#include "zoo/expert_parallel.hpp"

#include <cstdio>

namespace remat::cli {

void ModelOptions::bind(CLI::App& cmd) {
  decided_by_weights_ = {
      cmd.add_option("--model", model, "Model from the zoo")->check(CLI::IsMember(models().names()))->capture_default_str(),
      cmd.add_option("--preset", preset,
                     // The defaults differ by purpose: a check or a first training wants an answer in
                     // seconds, a measurement wants sizes where time and memory mean something.
                     preset == "tiny" ? "Size preset (tiny here, for an answer in seconds; time, plan and matrix "
                                        "measure at small)"
                                      : "Size preset (small here, sizes worth measuring; check, train and export "
                                        "default to tiny, for an answer in seconds)")
          ->check(CLI::IsMember(preset_names()))
          ->capture_default_str(),
      cmd.add_option("--layers", layers, "Override the preset's number of blocks L")->check(whole_number(1, 1 << 16)),
      cmd.add_option("--config", config,
                     "A published configuration instead of a preset, at real size (docs/models.md: e.g. llama-7b, "
                     "gpt2-124m, mixtral-8x7b); S is its S_max and B 1 unless --seq and --batch say otherwise")
          ->check(CLI::IsMember(config_names())),
      cmd.add_option("--experts", experts, "Override a mixture's number of experts E (mixtral)")
          ->check(whole_number(1, 1 << 12)),
      cmd.add_option("--top-k", top_k, "Override the experts K each token is routed to (mixtral)")
          ->check(whole_number(1, 1 << 12))};
  cmd.add_option("--seq", seq, "Override the preset's sequence length S")->check(whole_number(1, 1 << 20));
  cmd.add_option("--batch", batch, "Override the preset's batch size B")->check(whole_number(1, 1 << 16));
  cmd.add_option("--data", data, "Batch source: random, copy, reverse, text:PATH, h5:PATH[:DATASET]")
      ->capture_default_str();
  add_run_options(cmd, run, "Seed of the initialisation and the batch");
  add_router_aux_option(cmd, router_aux);
}

void add_run_options(CLI::App& cmd, RunSettings& run, const std::string& seed_help) {
  add_seed_option(cmd, run.seed, seed_help);
  add_attention_option(cmd, run.attention);
  add_precision_option(cmd, run.precision);
}

namespace {

const std::vector<std::string> kPrecisionNames = {"fp32", "bf16", "fp16"};

}  // namespace

void add_precision_option(CLI::App& cmd, Precision& precision) {
  // The text is checked against the names first (one line naming them), then
  // typed: nothing below the CLI sees a precision as text.
  cmd.add_option_function<std::string>(
         "--precision", [&precision](const std::string& name) { precision = parse_precision(name); },
         "What a step computes in: fp32, bf16 or fp16 (activations and a per-step copy of the weights in "
         "16 bits; float32 master weights, gradients, optimizer state and statistics; fp16 scales the "
         "loss: docs/precision.md)")
      ->check(CLI::IsMember(kPrecisionNames))
      ->default_str(precision_name(precision));
}

void add_precisions_option(CLI::App& cmd, std::vector<Precision>& precisions, const std::string& help) {
  std::string defaults;
  for (Precision p : precisions) defaults += (defaults.empty() ? "" : ",") + std::string(precision_name(p));
  cmd.add_option_function<std::vector<std::string>>(
         "--precisions",
         [&precisions](const std::vector<std::string>& names) {
           precisions.clear();
           for (const auto& name : names) precisions.push_back(parse_precision(name));
         },
         help)
      ->delimiter(',')
      ->check(CLI::IsMember(kPrecisionNames))
      ->default_str(defaults);
}

void print_precision_path(Precision precision) {
  if (precision != Precision::fp32)
    std::printf("%s: %s (docs/precision.md)\n", precision_name(precision), gemm::sixteen_bit_path());
}

void add_router_aux_option(CLI::App& cmd, double& weight) {
  cmd.add_option("--router-aux", weight,
                 "mixtral: weight of the load-balancing loss added to the cross-entropy (Switch Transformer's, as "
                 "Hugging Face's Mixtral computes it; 0: none)")
      ->check(CLI::Range(0.0, 1e6).description("from 0"))
      ->capture_default_str();
}

void add_attention_option(CLI::App& cmd, ops::AttentionKernel& kernel) {
  cmd.add_option_function<std::string>(
         "--attention", [&kernel](const std::string& name) { kernel = ops::parse_attention_kernel(name); },
         "Attention kernel: fused (keeps output and log-sum-exp, recomputes probabilities in backward; "
         "query tiles through the BLAS: a tile per thread on the host, batched GEMMs on a GPU), fused-team "
         "(the same as Kokkos team kernels, on any backend) or plain (keeps the probabilities)")
      ->check(CLI::IsMember({"fused", "fused-team", "plain"}))
      ->default_str("fused");
}

void add_freeze_options(CLI::App& cmd, FreezeOptions& freeze) {
  cmd.add_option("--freeze", freeze.patterns,
                 "Freeze the parameters these globs match (names as in docs/models.md, e.g. 'wte.*,h.[0-5].*'): no "
                 "gradient, and nothing saved for one")
      ->delimiter(',');
  cmd.add_option("--freeze-below", freeze.below, "Freeze the embeddings and blocks 0..N-1")
      ->check(whole_number(0, 1 << 16));
}

void add_lora_options(CLI::App& cmd, LoraOptions& lora) {
  cmd.add_option("--lora", lora.rank,
                 "LoRA rank R: adapters on the --lora-targets linears, every other parameter frozen")
      ->check(whole_number(1, 1 << 16));
  cmd.add_option("--lora-alpha", lora.alpha, "LoRA alpha (the adapters' output is scaled by alpha/R; default R)");
  cmd.add_option("--lora-targets", lora.targets,
                 "Globs over the linear weights to adapt (default: the attention's query and value projections)")
      ->delimiter(',');
}

void add_quantize_option(CLI::App& cmd, QuantFormat& format, const std::string& help) {
  cmd.add_option_function<std::string>(
         "--quantize", [&format](const std::string& name) { format = parse_quant_format(name); },
         !help.empty() ? help
                       : "Keep the frozen linear weights in nf4 (QLoRA's 4-bit NormalFloat, double-quantized scales) "
                         "or int8 (blockwise absmax), dequantized for each product (docs/fine-tuning.md); with "
                         "--lora, --freeze or --freeze-below. nf4 computes in bf16 unless --precision says otherwise")
      ->check(CLI::IsMember({"nf4", "int8", "none"}))
      ->default_str("none");
}

void quantized_precision_default(CLI::App& cmd, const QuantFormat& format, Precision& precision) {
  cmd.parse_complete_callback([&cmd, &format, &precision] {
    if (format == QuantFormat::nf4 && cmd.count("--precision") == 0) precision = Precision::bf16;
  });
}

void quantized_precision_default(CLI::App& cmd, const QuantFormat& format, std::vector<Precision>& precisions) {
  cmd.parse_complete_callback([&cmd, &format, &precisions] {
    if (format == QuantFormat::nf4 && cmd.count("--precisions") == 0) precisions = {Precision::bf16};
  });
}

void add_fine_tuning_options(CLI::App& cmd, FineTuning& finetune) {
  add_freeze_options(cmd, finetune.freeze);
  add_lora_options(cmd, finetune.lora);
  add_quantize_option(cmd, finetune.quantize);
}

void fine_tune(std::unique_ptr<ParamStore>& params, const Model& model, const Batch& batch, const FineTuning& finetune,
               std::uint64_t seed, const ModelSetup& setup, bool quiet) {
  const std::string said = apply_fine_tuning(params, model, batch, finetune, seed, setup);
  if (!quiet && !said.empty()) std::printf("%s\n", said.c_str());
}

void add_tp_options(CLI::App& cmd, int& tp, bool& sp) {
  cmd.add_option("--tp", tp,
                 "Tensor parallelism over N ranks (start with mpirun -n N): each rank holds 1/N of every layer's "
                 "heads, hidden units and vocabulary, as Megatron-LM splits them (docs/scale-out.md; gpt2, llama, "
                 "mixtral, encdec)")
      ->check(whole_number(1, 1 << 12))
      ->capture_default_str();
  cmd.add_flag("--sp", sp,
               "Sequence parallelism with --tp (Korthikanti et al. 2022): norms, dropout and residual adds run on 1/N "
               "of the sequence, all-gathers and reduce-scatters in place of the all-reduces (not bert)");
}

void add_ep_option(CLI::App& cmd, int& ep) {
  cmd.add_option("--ep", ep,
                 "Expert parallelism over N ranks (mixtral; start with mpirun -n N): each rank holds E/N experts and "
                 "runs B/N of the sequences, rows sent to their experts' ranks and back by all-to-all "
                 "(docs/scale-out.md; beside --tp N: on N x M ranks, the tensor groups innermost)")
      ->check(whole_number(1, 1 << 12))
      ->capture_default_str();
}

void add_cp_option(CLI::App& cmd, int& cp) {
  cmd.add_option("--cp", cp,
                 "Context parallelism over N ranks (start with mpirun -n N): the sequence split into 2N chunks, each "
                 "rank holding two (zig-zag), keys and values passed around a ring of the ranks for attention "
                 "(docs/scale-out.md; S divisible by 2N; beside --tp N: on N x M ranks)")
      ->check(whole_number(1, 1 << 12))
      ->capture_default_str();
}

void add_pipeline_options(CLI::App& cmd, pipeline::PipelineSettings& p, bool for_training) {
  cmd.add_option("--pp", p.stages,
                 "Pipeline parallelism over N ranks (start with mpirun -n N): the layers split into N stages, the "
                 "embedding on the first and the head on the last, activations sent forward and their gradients "
                 "back (docs/scale-out.md; gpt2, llama, mixtral, encdec)")
      ->check(whole_number(1, 1 << 10))
      ->capture_default_str();
  if (!for_training)
    cmd.add_option("--micro-batches", p.micro_batches,
                   "Micro-batches of the step (of --batch sequences each), their gradients summed in order and "
                   "averaged")
        ->check(whole_number(1, 1 << 12))
        ->capture_default_str();
  cmd.add_option(for_training ? "--pp-schedule" : "--schedule", p.schedule,
                 for_training ? "Pipeline schedule with --pp: gpipe, 1f1b, interleaved:V (V model chunks per rank) or "
                                "zb-h1 (zero-bubble: weight gradients delayed into the bubble); --accumulate is the "
                                "micro-batches"
                              : "Pipeline schedule: gpipe, 1f1b, interleaved:V (V model chunks per rank) or zb-h1 "
                                "(zero-bubble: weight gradients delayed into the bubble)")
      ->capture_default_str();
  cmd.add_option("--stage-layers", p.stage_layers,
                 "Layers per stage, comma-separated (e.g. 5,6,6,5), for an uneven split; default: even");
}

void add_seed_option(CLI::App& cmd, std::uint64_t& seed, const std::string& help) {
  cmd.add_option("--seed", seed, help)->check(seed_number())->capture_default_str();
}

Batch ModelOptions::make_batch(const Sizes& z) const { return make_batch_source(data, z.B, z.S, z.V, run.seed)->next(); }

void ModelOptions::bind_with_weights(CLI::App& cmd) {
  bind(cmd);
  cmd.add_option("--weights", weights,
                 "Start from these weights: a weight file (docs/models.md), a training run file, or a Hugging Face "
                 "model folder (config.json and safetensors; docs/weight-files.md). The model and its "
                 "sizes are the file's; --seq and --batch still apply");
}

ModelSetup ModelOptions::resolve() const {
  ModelSetup s;
  if (!weights.empty()) {
    for (const CLI::Option* o : decided_by_weights_)
      if (o->count() > 0)
        throw UserError(o->get_name() + " and --weights: the weights file decides the model and its sizes (" + weights +
                        ")");
    s = read_weights_setup(weights);
    if (seq) {
      if (seq > s.sizes.S_max)
        throw UserError("--seq " + std::to_string(seq) + ": " + weights + " holds positions for " +
                        std::to_string(s.sizes.S_max));
      s.sizes.S = seq;
    }
  } else if (!config.empty()) {
    const PublishedConfig& c = published_config(config);
    if (decided_by_weights_[1]->count() > 0) throw UserError("--config and --preset both name the sizes: give one");
    if (decided_by_weights_[0]->count() > 0 && model != c.model)
      throw UserError("--model " + model + " and --config " + config + ": that configuration is a " + c.model);
    s = {c.model, c.name, c.sizes};
    if (layers) s.sizes.L = layers;
    if (seq) {
      if (seq > c.sizes.S_max)
        throw UserError("--seq " + std::to_string(seq) + ": " + config + " was trained for at most " +
                        std::to_string(c.sizes.S_max) + " positions");
      s.sizes.S = seq;
    }
  } else {
    s = {model, preset, preset_sizes(preset)};
    if (layers) s.sizes.L = layers;
    if (seq) s.sizes.S = s.sizes.S_max = seq;
  }
  if (batch) s.sizes.B = batch;
  ep::override_experts(s.model, s.sizes, experts, top_k);
  s.sizes.router_aux = router_aux;
  validate(s.sizes);
  models().find(s.model);
  return s;
}

std::unique_ptr<ParamStore> ModelOptions::make_params(const ModelSetup& setup, bool force) const {
  if (!weights.empty()) return std::move(load_weights(weights, force).params);
  auto params = std::make_unique<ParamStore>(models().find(setup.model).make(setup.sizes)->params(), DType::f32);
  initialize(*params, run.seed, setup.sizes.L);
  return params;
}

std::int64_t require_step_memory(const ModelSetup& setup, ops::AttentionKernel kernel,
                                 const std::vector<std::string>& strategies, int parameter_copies, bool force) {
  const Sizes& z = setup.sizes;
  return require_step_fits(setup, kernel, strategies, parameter_copies,
                           setup.model + " (L " + std::to_string(z.L) + ", D " + std::to_string(z.D) + ", S " +
                               std::to_string(z.S) + ", B " + std::to_string(z.B) + ")",
                           0, force);
}

}  // namespace remat::cli
