#pragma once
// `remat plan --gpus G`: the layouts a training on G GPUs of a kind could
// take (tensor x context x pipeline x data parallel, micro-batches, a
// strategy), each costed by the estimate's own shape-only runs: exact memory
// per rank (every pipeline stage's), the step priced by the device model.
// What fits, fastest first, and why the rest were dropped.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/estimate_grid.hpp"

namespace remat {

struct LayoutRequest {
  // What every layout's estimate shares: the model and its sizes at the
  // sequence length S (B: one sequence per micro-batch), the strategies,
  // attention, precision, optimizer, and the device (with rates: the step
  // is priced). Each layout sets its own split and ranks on a copy.
  EstimateRequest point;
  int gpus = 0;
  int gpus_per_node = 8;  // a tensor-parallel group stays within a node
  std::int64_t global_batch_tokens = std::int64_t(1) << 22;  // per optimizer step, over every replica
};

struct TrainingLayout {
  int tp = 1, cp = 1, pp = 1, dp = 1;
  bool sp = false;
  bool shard = false;  // ZeRO-3 over the replicas (--shard-params): each keeps 1/dp of its state
  int micro_batches = 1;         // per replica and step, of one sequence each
  std::vector<int> stage_layers;  // under pp: each stage's blocks (empty under interleaved: an even split)
  std::string schedule = "1f1b";  // under pp: 1f1b, zb-h1 or interleaved:2
  std::string strategy;
  std::string flags() const;  // as `remat estimate` takes them: "--batch 1 --tp 8 --sp --pp 4 --micro-batches 16 ..."
  // The stages' blocks as --stage-layers takes them ("" for an even split).
  std::string stage_list() const;
  // Whether remat runs it (grads, train), not only estimates it: two of
  // --tp, --cp and --pp together are estimated only (data parallelism
  // composes with each; sharded, with --tp alone).
  bool runs() const { return (tp > 1) + (cp > 1) + (pp > 1) <= 1 && !(shard && (cp > 1 || pp > 1)); }
};

struct LayoutVerdict {
  TrainingLayout layout;
  std::int64_t largest_total = 0;  // bytes on the hungriest rank
  int hungriest_stage = 0;
  double step_seconds = 0;     // the device model's, the gradients' data-parallel exchange included
  // Of it, the gradients' all-reduce over the data- and context-parallel
  // ranks; zero-3: the M micro-batches' gathers and reduce-scatters.
  double exchange_seconds = 0;
  double bubble = 0;           // under pp: the stages' idle share of the pipeline's step
  bool fits = false;
  std::string why_not;  // where it does not fit: "stage 1 over by 3.2 GiB", "offload pool over the host by ..."
  double tokens_per_second() const;
  std::int64_t global_tokens = 0;
};

struct LayoutSearch {
  std::vector<LayoutVerdict> verdicts;  // every layout and strategy costed, fastest fitting first, then the rest
  std::vector<std::string> skipped;     // layouts not costed, each with why ("tp 8: 8 does not divide H = 12")
};

// UserError for a request that cannot be searched: G < 1, a device without
// rates, a global batch of less than one sequence.
void check_request(const LayoutRequest& r);

// Every layout of the request, costed (check_request first). `progress`
// hears each layout as it is costed.
LayoutSearch search_layouts(const LayoutRequest& r, const std::function<void(const std::string&)>& progress = {});

// The blocks of each of `stages` stages: as even as L allows, the extra
// blocks on the middle stages (Llama 3's 126 over 16: 7, 8 x 14, 7).
std::vector<int> balanced_stage_layers(int L, int stages);

}  // namespace remat
