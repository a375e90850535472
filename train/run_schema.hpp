#pragma once
// The training run file's fields (docs/training.md, "The run file"),
// declared once: run_file.cpp writes and reads through these, and the docs'
// tables are tested against them. A field is one line. The weights and the
// model's attributes are a weight file's (docs/models.md).
#include <cstdint>
#include <string>
#include <vector>

#include "h5/record.hpp"

// X(identifier, name in the file, type, unit, meaning); the state of the
// last save, on the root.
#define REMAT_RUN_ROOT(X)                                                                                             \
  X(version, "remat_training_run", std::int64_t, "", "version (1)")                                                 \
  X(done, "train.done", std::string, "", "steps done (text, as every `train.` attribute)")                          \
  X(data_position, "train.data_position", std::string, "",                                                           \
    "training batches of B read (K per step with `--accumulate K`; n K with n ranks)")                               \
  X(optimizer_steps, "train.optimizer_steps", std::string, "",                                                       \
    "optimizer steps (fewer than the steps done where fp16 skipped some)")                                            \
  X(loss_scale, "train.loss_scale", std::string, "",                                                                 \
    "fp16's dynamic loss scale for the next step (written at every precision; unused but at fp16)")                  \
  X(loss_scale_good_steps, "train.loss_scale_good_steps", std::string, "",                                           \
    "the steps in a row without an overflow behind that scale")                                                       \
  X(rank_memory, "rank_memory.<name>", std::int64_t, "bytes",                                                         \
    "what one rank held at the last step besides activations: `parameters`, `gradients`, `optimizer` (whole, or "    \
    "under `--shard-params` its shards), `gathered_peak` and `reducing_peak` (the most parameters gathered at once, " \
    "the most whole gradients awaiting their reduce-scatter at once)")

// Every setting of the run, as text: `--resume` compares them one by one.
#define REMAT_RUN_SETTINGS(X)                                                                                         \
  X(strategy, "train.strategy", "the strategy spec (a resumed run may change it between exact strategies)")         \
  X(attention, "train.attention", "the attention kernel")                                                            \
  X(precision, "train.precision", "`fp32`, `bf16` or `fp16` (docs/precision.md; absent in older files: fp32)")     \
  X(loss_scale_init, "train.loss_scale_init", "`--loss-scale`")                                                      \
  X(data, "train.data", "the batch source")                                                                          \
  X(seed, "train.seed", "seed of weights, batches and dropout")                                                      \
  X(dropout, "train.dropout", "dropout probability")                                                                 \
  X(steps, "train.steps", "steps the run trains for")                                                                \
  X(optimizer, "train.optimizer", "`adamw` or `sgd`")                                                                \
  X(lr, "train.lr", "peak learning rate")                                                                            \
  X(warmup, "train.warmup", "warm-up steps")                                                                         \
  X(schedule, "train.schedule", "learning-rate schedule")                                                            \
  X(weight_decay, "train.weight_decay", "AdamW's decoupled weight decay")                                            \
  X(beta1, "train.beta1", "AdamW's first-moment decay")                                                              \
  X(beta2, "train.beta2", "AdamW's second-moment decay")                                                             \
  X(eps, "train.eps", "AdamW's epsilon")                                                                             \
  X(momentum, "train.momentum", "SGD's momentum")                                                                    \
  X(grad_clip, "train.grad_clip", "gradient-norm clip (0: none)")                                                    \
  X(accumulate, "train.accumulate", "micro-batches per step")                                                        \
  X(eval_every, "train.eval_every", "steps between validation losses (0: none)")                                     \
  X(eval_batches, "train.eval_batches", "held-out batches per validation loss")                                      \
  X(save_every, "train.save_every", "steps between saves")                                                           \
  X(freeze, "train.freeze", "frozen parameters, `patterns=a,b;below=N` (docs/fine-tuning.md; empty: none)")          \
  X(lora, "train.lora", "LoRA, `rank=R;alpha=A;targets=...` (docs/fine-tuning.md; empty: none)")                    \
  X(quantize, "train.quantize", "the frozen linear weights' format, `nf4` or `int8` (QLoRA, docs/fine-tuning.md; empty: none)") \
  X(ranks, "train.ranks", "data-parallel ranks (docs/scale-out.md)")                                                 \
  X(shard_params, "train.shard_params", "`yes` or `no`: ZeRO-3 sharding")                                            \
  X(tensor_parallel, "train.tensor_parallel", "tensor parallelism, `tp=N;sp=yes` or `tp=N;sp=no` (absent: none)")                \
  X(expert_parallel, "train.expert_parallel", "expert-parallel ranks, `ep=N` (absent: none)")                       \
  X(context_parallel, "train.context_parallel", "context-parallel ranks, `cp=N` (absent: none)")                   \
  X(router_aux, "train.router_aux", "mixtral only: `--router-aux`")                                                  \
  X(init, "train.init", "only for `--weights`: the weights the run started from (docs/weight-files.md)")

// Datasets, from the root: X(identifier, path, element type, shape, unit, meaning)
#define REMAT_RUN_DATASETS(X)                                                                                         \
  X(params, "params/<name>", float, "[...]", "", "the weights (docs/models.md)")                                     \
  X(optimizer_state, "optimizer/<buffer>/<name>", float, "[...]", "",                                                \
    "the optimizer's state: `m`, `v` for AdamW, `momentum` for SGD with momentum; none for frozen parameters")       \
  X(loss, "history/loss", double, "[steps]", "", "loss of each step done")                                           \
  X(lr, "history/lr", double, "[steps]", "", "its learning rate")                                                    \
  X(grad_norm, "history/grad_norm", double, "[steps]", "", "its gradient norm (not finite where fp16 skipped it)")   \
  X(step_time, "history/step_time", double, "[steps]", "s", "its time")                                              \
  X(activation_peak, "history/activation_peak", std::int64_t, "[steps]", "bytes", "its activation peak")            \
  X(comm_bytes, "history/comm_bytes", std::int64_t, "[steps]", "bytes",                                              \
    "rank 0 sent plus received, in data-parallel training (0 in one process; docs/scale-out.md)")                    \
  X(comm_seconds, "history/comm_seconds", double, "[steps]", "s", "rank 0 spent exchanging")                         \
  X(predicted_comm_bytes, "history/predicted_comm_bytes", std::int64_t, "[steps]", "bytes",                          \
    "what the schedule says `comm_bytes` must be (0 in one process)")                                                 \
  X(loss_scale, "history/loss_scale", double, "[steps]", "", "the loss scale backward was seeded with (1 but at fp16)") \
  X(skipped, "history/skipped", std::int64_t, "[steps]", "", "1 where an overflow skipped the update")               \
  X(eval_step, "history/eval_step", std::int64_t, "[evals]", "", "the steps after which validation losses were taken") \
  X(eval_loss, "history/eval_loss", double, "[evals]", "", "those validation losses")                                \
  X(loss_part, "history/loss_parts/<part>", double, "[steps]", "",                                                   \
    "where the model's loss has named parts: mixtral's `ce` and `aux` (`loss = ce + router_aux * aux`), means over " \
    "the step's micro-batches (and ranks) like `loss`")                                                              \
  X(stat, "history/stats/<name>", double, "[steps, ...]", "",                                                        \
    "the model's statistics, summed over micro-batches and ranks: mixtral's `expert_load` [steps, L, E], the token " \
    "rows each expert received in each layer (`remat report --svg` draws `experts.svg` from it)")              \
  X(pipeline_passes, "pipeline/passes", double, "[stages, passes, 7]", "",                                          \
    "under `--pp` only: the last step's passes on each stage of the first pipeline, in the stage's order, each "    \
    "kind (0 forward, 1 backward), micro-batch, chunk, start and end (s from the stage's step start), the stage's "  \
    "activation bytes at its end and its peak during it (`remat report --svg` draws `pipeline.svg` from it)")

namespace remat::run_file {

namespace root {
#define REMAT_RUN_DECLARE_ATTR(id, name, T, unit, meaning) inline constexpr h5::Attr<T> id{name, unit, meaning};
REMAT_RUN_ROOT(REMAT_RUN_DECLARE_ATTR)
}  // namespace root
namespace setting {
#define REMAT_RUN_DECLARE_SETTING(id, name, meaning) inline constexpr h5::Attr<std::string> id{name, "", meaning};
REMAT_RUN_SETTINGS(REMAT_RUN_DECLARE_SETTING)
}  // namespace setting
namespace data {
#define REMAT_RUN_DECLARE_DATASET(id, name, T, shape, unit, meaning) \
  inline constexpr h5::Dataset<T> id{name, shape, unit, meaning};
REMAT_RUN_DATASETS(REMAT_RUN_DECLARE_DATASET)
}  // namespace data

// A setting's name in messages: "lr" for train.lr.
std::string short_name(const h5::Attr<std::string>& setting);

// The tables of docs/training.md, made from the declarations above.
std::vector<h5::FieldDoc> root_docs();
std::vector<h5::FieldDoc> setting_docs();
std::vector<h5::FieldDoc> dataset_docs();

}  // namespace remat::run_file
