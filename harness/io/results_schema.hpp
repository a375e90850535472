#pragma once
// The results file's fields (docs/results-schema.md), declared once: the
// writer (results_file.cpp), the report's reader and the merge's check use
// these, and the docs' tables are tested against them. A field is one line.
#include <cstdint>
#include <string>
#include <vector>

#include "h5/record.hpp"
#include "weights/weights_schema.hpp"  // the model setup both carry

// X(identifier, name in the file, type, unit, meaning)
#define REMAT_RESULTS_ROOT(X)                                                     \
  X(version, "remat_results", std::int64_t, "", "schema version (2)")            \
  X(created, "created", std::string, "", "UTC time the file was created")

// A run's attributes. A run out of memory (`status` oom) has only those
// above `status`. The model setup is the weight file's (also in `key`).
#define REMAT_RESULTS_RUN_ATTRIBUTES(X)                                                                               \
  X(key, "key", std::string, "",                                                                                      \
    "every option that changes the run, e.g. `model=gpt2;preset=small;strategy=full;L=12;...;attention=fused;"       \
    "data=random;seed=1;mem_limit=0`")                                                                                \
  REMAT_MODEL_SETUP(X)                                                                                                \
  X(strategy, "strategy", std::string, "", "the strategy spec, e.g. `every:2+offload`")                              \
  X(data, "data", std::string, "", "the batch source")                                                               \
  X(weights, "weights", std::string, "",                                                                              \
    "only for `matrix --weights`: the weight file or Hugging Face model folder the run started from (also in `key`)") \
  X(layout, "layout", std::string, "",                                                                                \
    "only for runs split over ranks (`matrix --tp/--sp`, `--ep`, `--cp`): `tp=2`, `tp=2;sp=1`, `ep=2` or `cp=2` (also " \
    "in `key`); its memory figures are rank 0's, its step times the slowest rank's, its loss the whole model's (under " \
    "`--cp` the ranks' shares summed)")                                                                                \
  X(seed, "seed", std::int64_t, "", "seed of weights, batch and dropout")                                             \
  X(mem_limit, "mem_limit_bytes", std::int64_t, "bytes", "`--mem-limit` (0: none)")                                  \
  X(dropout, "dropout", double, "", "dropout probability")                                                            \
  X(router_aux, "router_aux", double, "", "mixtral only: the load-balancing loss's weight (also in `key`)")           \
  X(attention, "attention", std::string, "", "attention kernel that ran (`fused`, `fused-team` or `plain`)")         \
  X(precision, "precision", std::string, "",                                                                          \
    "what the step computed in: `fp32`, `bf16` or `fp16` (docs/precision.md; in `key` and the run's name only when " \
    "not `fp32`, so files from before it read the same; absent in those files: fp32)")                               \
  X(finetune, "finetune", std::string, "",                                                                            \
    "only for fine-tuned runs (`--freeze`, `--freeze-below`, `--lora`): what was applied (also in `key`)")           \
  X(finetune_label, "finetune_label", std::string, "", "only for fine-tuned runs: its short label")                 \
  X(frozen_parameters, "frozen_parameters", std::string, "",                                                          \
    "only for fine-tuned runs: the parameters that had no gradient, comma-separated")                                 \
  X(backend, "backend", std::string, "", "e.g. `Kokkos 3.4.1, OpenMP, 2 threads`")                                   \
  X(threads, "threads", std::int64_t, "", "concurrency of the execution space")                                       \
  X(kokkos_version, "kokkos_version", std::string, "", "`KOKKOS_VERSION`, e.g. `30401`")                             \
  X(git_revision, "git_revision", std::string, "", "remat revision it was built from")                               \
  X(host, "host", std::string, "", "the machine")                                                                     \
  X(run_time, "time", std::string, "", "UTC time of the run")                                                         \
  X(status, "status", std::string, "",                                                                                \
    "`ok`, or `oom` when the run needed more than `--mem-limit` (then only the attributes above this row are "       \
    "written)")                                                                                                       \
  X(step_time_median, "step_time_median", double, "s",                                                               \
    "per training step (forward + backward), the median of the timed steps; a fence precedes each clock read")       \
  X(step_time_min, "step_time_min", double, "s", "the fastest timed step")                                           \
  X(step_time_max, "step_time_max", double, "s", "the slowest timed step")                                           \
  X(tokens_per_second, "tokens_per_second", double, "1/s", "B S / median step time")                                 \
  X(time_vs_full, "time_vs_full", double, "",                                                                         \
    "the median over the timed rounds of this run's step time over `full`'s in the same round (a matrix times a "    \
    "shape's strategies interleaved, one step of each per round, the order rotated); absent where `full` was not "   \
    "timed beside it")                                                                                                \
  X(time_vs_full_spread, "time_vs_full_spread", double, "", "half the interquartile range of those per-round ratios") \
  X(timing_capped, "timing_capped", std::int64_t, "",                                                                 \
    "1 if the rounds stopped at `--max-steps` before every ratio's spread was within `--spread` of it")              \
  X(loss, "loss", double, "", "loss of the measured step")                                                            \
  X(loss_part, "loss.<part>", double, "",                                                                             \
    "the model's named parts of it, where it has them (mixtral: `loss.ce` and `loss.aux`, with `loss = loss.ce + "   \
    "router_aux * loss.aux`)")                                                                                        \
  X(activation_peak, "activation_peak_bytes", std::int64_t, "bytes",                                                  \
    "device-pool peak during the measured step minus what was live before it (parameters, gradients, batch)")        \
  X(predicted_activation, "predicted_activation_bytes", std::int64_t, "bytes",                                        \
    "the strategy's prediction from a probe step (see `remat check`)")                                                \
  X(offload_peak, "offload_peak_bytes", std::int64_t, "bytes", "the same as `activation_peak_bytes` for the host "   \
    "offload pool")                                                                                                   \
  X(predicted_offload, "predicted_offload_bytes", std::int64_t, "bytes", "the probe's prediction of it")             \
  X(offload_copy_seconds, "offload_copy_seconds", double, "s",                                                        \
    "the checked step's offload copies, their own time (on the copy stream, timed by CUDA events, on a GPU); 0 "     \
    "where nothing is copied (the host backend moves saved tensors to the offload pool without copying); absent "    \
    "from files written before they were recorded")                                                                   \
  X(offload_wait_seconds, "offload_wait_seconds", double, "s",                                                        \
    "the time the computing thread spent issuing and waiting for those copies: `1 - wait/copy` is the share hidden " \
    "behind compute")                                                                                                 \
  X(gemm_flops, "gemm_flops", double, "FLOP", "GEMM FLOPs of the measured step, recomputation included")             \
  X(recompute_share, "recompute_flops_share", double, "", "share of those spent recomputing")                        \
  X(dequantize_flops, "dequantize_flops", double, "FLOP",                                                             \
    "the measured step's dequantizations of quantized weights (`--quantize`; 0 without), recomputation's included")  \
  X(recompute_dequantize_flops, "recompute_dequantize_flops", double, "FLOP", "of those, inside recomputation")      \
  X(dequantize_seconds, "dequantize_seconds", double, "s", "the measured step's time dequantizing (fenced)")          \
  X(recompute_dequantize_seconds, "recompute_dequantize_seconds", double, "s", "of it, inside recomputation")        \
  X(grad_max_abs, "grad_max_abs_error", double, "", "largest gradient error against `full` on the same weights and " \
    "batch")                                                                                                          \
  X(grad_max_rel, "grad_max_rel_error", double, "",                                                                   \
    "the same, relative: per tensor, to its largest gradient magnitude")                                              \
  X(bitwise, "bitwise_equal_to_full", std::int64_t, "", "1 if loss and every gradient are identical to the bit")

// A run's datasets: X(identifier, path under the run's group, element type, shape, unit, meaning)
#define REMAT_RESULTS_RUN_DATASETS(X)                                                                                 \
  X(step_times, "step_times", double, "[steps]", "s", "each timed step")                                              \
  X(losses, "losses", double, "[steps]", "", "loss of each timed step")                                               \
  X(timeline_seconds, "timeline/seconds", double, "[E]", "s", "time of each allocation event of the measured step")  \
  X(timeline_bytes, "timeline/bytes", std::int64_t, "[E]", "bytes", "device-pool bytes live after it, minus the "    \
    "baseline")                                                                                                       \
  X(timeline_phase, "timeline/phase", std::int32_t, "[E]", "", "index into `timeline/phase_names`")                  \
  X(timeline_phase_names, "timeline/phase_names", std::string, "[P]", "",                                            \
    "e.g. `forward h.3`, `recompute h.3`, `backward h.3`, `offload h.3`")                                             \
  X(grad_names, "grad_error/names", std::string, "[params]", "", "parameter names")                                 \
  X(grad_abs, "grad_error/max_abs", double, "[params]", "", "per-parameter gradient error against `full`")           \
  X(grad_rel, "grad_error/max_rel", double, "[params]", "", "the same, relative to the parameter's largest gradient") \
  X(stat, "stats/<name>", double, "[...]", "",                                                                        \
    "statistics the model reports for the measured step (mixtral: `stats/expert_load` [L, E], the token rows "       \
    "routed to each expert in each layer)")

namespace remat::results {

#define REMAT_DECLARE_ATTR(id, name, T, unit, meaning) inline constexpr h5::Attr<T> id{name, unit, meaning};
#define REMAT_DECLARE_DATASET(id, name, T, shape, unit, meaning) \
  inline constexpr h5::Dataset<T> id{name, shape, unit, meaning};
namespace root {
REMAT_RESULTS_ROOT(REMAT_DECLARE_ATTR)
}
REMAT_RESULTS_RUN_ATTRIBUTES(REMAT_DECLARE_ATTR)
REMAT_RESULTS_RUN_DATASETS(REMAT_DECLARE_DATASET)

// The group that holds the runs, and one run's group in it.
inline constexpr const char* kRunsGroup = "/runs";
inline std::string run_group(const std::string& name) { return std::string(kRunsGroup) + "/" + name; }

// The tables of docs/results-schema.md, made from the declarations above.
std::vector<h5::FieldDoc> root_docs();
std::vector<h5::FieldDoc> run_attribute_docs();
std::vector<h5::FieldDoc> run_dataset_docs();

}  // namespace remat::results
