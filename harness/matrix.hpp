#pragma once
// The strategy matrix: every (model, shape, strategy) cell, one measured
// step for memory and equivalence (against full on the same weights and
// batch), then timed steps; each cell appended to the results file as soon
// as it is done.
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "core/rank_group.hpp"
#include "finetune/fine_tuning.hpp"
#include "harness/io/results_file.hpp"

namespace remat {

struct MatrixOptions {
  std::vector<std::string> models{"gpt2"};
  std::string strategies = "all";       // per model: "all" or a list (see strategies_for)
  std::string preset = "small";
  std::string config;  // a published configuration instead of the preset (its model alone)
  // Run every cell on these weights (a weight file or a Hugging Face
  // model folder), whose model and sizes they are; --seq and --batch still sweep.
  std::string weights;
  std::vector<int> layers, seq, batch;  // empty: the preset's
  // Timed rounds: a round runs one step of each strategy of a shape
  // (harness/matrix_timing.hpp); at least `steps`, then more until every
  // ratio to full is within `spread`, at most `max_steps` (0: 2 x steps).
  int steps = 3, warmup = 1, max_steps = 0;
  double spread = 0.02;
  std::uint64_t seed = 1;
  std::string data = "random";  // batch source
  ops::AttentionKernel attention = ops::AttentionKernel::fused;
  std::vector<Precision> precisions{Precision::fp32};  // an axis: each cell at each
  double dropout = 0;
  double router_aux = 0.01;  // mixtral's load-balancing loss weight
  std::string out = "results.h5";
  bool resume = false;
  std::int64_t mem_limit = 0;  // simulated device size in bytes (0: none); a run past it is recorded as OOM
  bool force = false;          // run even where the memory estimate says it will not fit
  FineTuning finetune;         // frozen parameters, LoRA: every cell of this run
  // A split over ranks, every cell run by all ranks of a group (at most one
  // of them split, apply_shared_split in harness/tensor_layout.hpp): tensor parallelism (--tp,
  // --sp), expert (--ep) or context (--cp); this rank's place in its group.
  RankGroup tp, ep = RankGroup::expert(), cp = RankGroup::context();
  // This process runs only the cells deal_cells gives `shard`: `--shard i/n`
  // of a job array, or an MPI rank of n.
  int shard = 0, shards = 1;
};

// The most timed steps a run gets: --max-steps, by default twice --steps.
int max_timed_steps(const MatrixOptions& o);

// "i/n" -> (i, n); UserError unless 0 <= i < n.
std::pair<int, int> parse_shard(const std::string& text);

// Every cell the options name, in run order, each once (a model, size or
// strategy named twice runs once). Validates everything that can be known
// before the first run: models, sizes, strategies, the data source at every
// shape, the results file, and the memory each shape needs. Throws
// UserError on the first problem.
std::vector<RunKey> matrix_cells(const MatrixOptions& o);

// Which shard runs each cell: consecutive cells (matrix_cells' order), in
// runs of about equal estimated work. Consecutive, because the cells of one
// model and shape share the `full` reference a shard must compute for them:
// round-robin dealing would make every shard compute every shape's.
std::vector<int> deal_cells(const std::vector<RunKey>& cells, int shards);

struct MatrixProgress {
  std::function<void(std::size_t done, std::size_t total, const RunKey& cell, const std::string& what)> update;
  std::function<void(const RunRecord&)> finished;
};

// Runs the cells not yet in the results file (all of them without --resume,
// which is then an error if any is recorded). Returns the records made.
// `cells`: matrix_cells(o), where the caller has them already (each shape's
// memory check is a shape-only step: not worth running twice).
std::vector<RunRecord> run_matrix(const MatrixOptions& o, const std::vector<RunKey>& cells,
                                  const MatrixProgress& progress);
std::vector<RunRecord> run_matrix(const MatrixOptions& o, const MatrixProgress& progress);

}  // namespace remat
