// remat matrix: the strategy comparison matrix, recorded in HDF5, with a
// progress line and a summary table.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <tuple>

#include "autodiff/runtime.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/format.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/cli/validators.hpp"
#include "harness/matrix.hpp"
#include "harness/matrix_table.hpp"
#include "harness/tensor_layout.hpp"
#include "harness/report/report.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "strategies/trace.hpp"
#include "zoo/configs.hpp"

namespace remat::cli {
namespace {

struct Options {
  MatrixOptions matrix;
  std::string models = "gpt2";
  std::string shard;  // "i/n"
  const CLI::Option* shard_option = nullptr;  // given (even as ''), or not
  const CLI::Option* config_option = nullptr;
  std::vector<const CLI::Option*> decided_by_weights;  // --models, --preset, --layers: the weights file's with --weights
  int tp = 1, ep = 1, cp = 1;  // a split over ranks (--tp beside at most one of the others)
  bool sp = false;
};

std::vector<std::string> model_names(const std::string& s) {
  return split_list(s, "--models");
}

void print_summary(const std::vector<RunRecord>& records) {
  const MatrixSummary summary = matrix_summary(records);
  std::printf("\n%s", render_text(summary.table).c_str());
  for (const auto& n : summary.notes) std::printf("%s\n", n.c_str());
  std::printf("vs full: step time over full's on the same model and shape, the median of the rounds' ratios (the\n"
              "strategies timed side by side) +- half their interquartile range; '~ full' where that holds 1.00.\n"
              "act MiB: the device pool's activation peak; offl. MiB: the host offload pool's; copies hidden: the\n"
              "offload copies' time and the share of it that ran behind compute (- : none; the host moves, not copies).\n");
}

// --tp/--sp, --ep or --cp: the job's groups of ranks, each running its
// share of the cells split over its ranks; what does not go with it yet refused.
void resolve_split(Options& o) {
  const SplitGroups groups = apply_shared_split({o.tp, o.sp, o.ep, o.cp});
  o.matrix.tp = groups.tp;
  o.matrix.ep = groups.ep;
  o.matrix.cp = groups.cp;
  if (o.tp == 1 && !o.sp && o.ep == 1 && o.cp == 1) return;
  if (o.matrix.mem_limit > 0)
    throw UserError(RankLayout{o.tp, o.sp, o.ep, o.cp}.flags() +
                    " with --mem-limit: not yet (a rank out of memory would leave its group waiting)");
  // Under --tp adapters and quantized weights split with their weights; under --cp every rank holds the whole model.
  if (o.ep > 1 && o.matrix.finetune.lora.any()) throw UserError("--ep with --lora: not yet");
}

// The options checked against each other and the shard this process runs
// (--shard i/n, or its MPI rank); returns whether --shard was given.
bool resolve(Options& o) {
  if (!o.matrix.weights.empty())
    for (const CLI::Option* decided : o.decided_by_weights)
      if (decided->count() > 0)
        throw UserError(decided->get_name() + " and --weights: the weights file decides the model and its sizes (" +
                        o.matrix.weights + ")");
  if (o.config_option->count() > 0) {
    // decided_by_weights: --models, --preset, --config, --layers
    if (o.decided_by_weights[1]->count() > 0) throw UserError("--config and --preset both name the sizes: give one");
    const std::string& model = published_config(o.matrix.config).model;
    if (o.decided_by_weights[0]->count() > 0 && model_names(o.models) != std::vector<std::string>{model})
      throw UserError("--models " + o.models + " and --config " + o.matrix.config + ": that configuration is a " +
                      model);
  }
  o.matrix.models = o.matrix.weights.empty() ? model_names(o.models) : std::vector<std::string>{};
  const bool sharded = o.shard_option->count() > 0;
  if (sharded) std::tie(o.matrix.shard, o.matrix.shards) = parse_shard(o.shard);
  if (sharded && comm::size() > 1)
    throw UserError("--shard i/n and mpirun both share the runs out: give one (under mpirun every rank is a shard)");
  resolve_split(o);
  if (comm::size() > 1) {  // each rank a shard, or each group of ranks that splits a cell
    o.matrix.shard = comm::rank(comm::Group::data);
    o.matrix.shards = comm::size(comm::Group::data);
  }
  return sharded;
}

// What will run: how the runs are shared out, and what 'all' holds per model.
void announce(const Options& o, const std::vector<RunKey>& cells, bool sharded) {
  const bool speaks = comm::rank() == 0;  // under mpirun, rank 0 reports for all
  const auto shard_of = deal_cells(cells, o.matrix.shards);
  const auto mine = std::size_t(std::count(shard_of.begin(), shard_of.end(), o.matrix.shard));
  if (sharded && mine == 0)
    throw UserError("--shard " + o.shard + ": this shard has none of the matrix's " + std::to_string(cells.size()) +
                    " runs (they are dealt out by work, consecutively): use fewer shards");
  const int group = comm::size(comm::Group::model);
  const std::string split = cells.empty() ? "" : cells.front().layout();
  if (group > 1 && speaks && comm::size(comm::Group::data) == 1)
    std::printf("each run split over the %d MPI ranks (%s); rank 0 writes them, with its own memory figures and the "
                "slowest rank's step times\n", group, split.c_str());
  else if (group > 1 && speaks)
    std::printf("%d groups of %d MPI ranks share the %zu runs (consecutive runs of about equal work each), each run "
                "split over its group's ranks (%s); rank 0 writes them all, with their group's first rank's memory "
                "figures and the slowest rank's step times\n",
                comm::size(comm::Group::data), group, cells.size(), split.c_str());
  else if (comm::size() > 1 && speaks)
    std::printf("%d MPI ranks share the %zu runs (consecutive runs of about equal work each); rank 0 writes them all\n",
                comm::size(), cells.size());
  else if (o.matrix.shards > 1)
    std::printf("shard %d of %d: %zu of the %zu runs (consecutive runs of about equal work per shard)\n", o.matrix.shard,
                o.matrix.shards, mine, cells.size());
  if (speaks)
    std::printf("remat matrix: %zu runs (%s x strategies %s), preset %s, %d warm-up + %d to %d timed steps "
                "(to +-%g%% of each ratio to full), %s -> %s\n",
                comm::size() > 1 ? cells.size() : mine, o.models.c_str(), o.matrix.strategies.c_str(),
                o.matrix.preset.c_str(), o.matrix.warmup, o.matrix.steps,
                max_timed_steps(o.matrix),
                100 * o.matrix.spread, Runtime::describe().c_str(), o.matrix.out.c_str());
  if (speaks && o.matrix.strategies.find("all") != std::string::npos) {
    // What 'all' holds differs by model (reversible is for reversible models).
    std::vector<std::string> said;
    for (const auto& c : cells)
      if (std::find(said.begin(), said.end(), c.model) == said.end()) {
        said.push_back(c.model);
        std::string list;
        for (const auto& d : cells)
          if (d.model == c.model && d.sizes.L == c.sizes.L && d.sizes.S == c.sizes.S && d.sizes.B == c.sizes.B)
            list += (list.empty() ? "" : " ") + d.strategy;
        std::printf("  %s: %s\n", c.model.c_str(), list.c_str());
      }
  }
}

// Progress on stderr: a bar on a terminal, a line per run's stage otherwise.
MatrixProgress progress_reporting() {
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  MatrixProgress progress;
  progress.update = [=](std::size_t done, std::size_t total, const RunKey& cell, const std::string& what) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string eta = done ? duration(elapsed / double(done) * double(total - done)) : "?";
    if (tty) {
      const int width = 24, filled = int(width * done / std::max<std::size_t>(total, 1));
      std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu  %s: %s  ETA %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total, cell.name().c_str(), what.c_str(), eta.c_str());
    } else if (what == "warm-up" || what == "checking against full" || what.rfind("already", 0) == 0) {
      // (A shape's runs are timed side by side and finish together: the count is of finished runs.)
      std::fprintf(stderr, "[%zu of %zu done] %s: %s (ETA %s)\n", done, total, cell.name().c_str(), what.c_str(),
                   eta.c_str());
    }
  };
  return progress;
}

void run(Options& o) {
  const bool sharded = resolve(o);
  const bool speaks = comm::rank() == 0;  // under mpirun, rank 0 reports for all
  const auto cells = matrix_cells(o.matrix);
  announce(o, cells, sharded);
  std::fflush(stdout);
  const auto records = run_matrix(o.matrix, cells, speaks ? progress_reporting() : MatrixProgress{});
  if (!speaks) return;
  if (isatty(fileno(stderr))) std::fprintf(stderr, "\r\033[K");
  if (comm::size() > 1) {  // the runs of every rank are in the file, not all in `records`
    std::printf("\n%s\nthe %d ranks' runs are in %s\n", markdown_summary(read_results(o.matrix.out)).c_str(),
                comm::size(), o.matrix.out.c_str());
    return;
  }
  if (records.empty()) std::printf("nothing to run: every run is already in %s\n", o.matrix.out.c_str());
  else print_summary(records);
  std::printf("wrote %zu runs to %s\n", records.size(), o.matrix.out.c_str());
}

}  // namespace

// --steps, --max-steps, --spread, --warmup: the timed rounds (harness/matrix_timing.hpp).
void add_timing_options(CLI::App& cmd, MatrixOptions& m) {
  cmd.add_option("--steps", m.steps,
                 "Timed steps per run, at least: a shape's strategies are timed in rounds, one step of each a round "
                 "(the order rotated), so that each ratio to full compares steps taken side by side")
      ->check(whole_number(1, 1000000))
      ->capture_default_str();
  cmd.add_option("--max-steps", m.max_steps,
                 "Timed steps per run, at most: rounds go on past --steps until every ratio to full is known within "
                 "--spread (default: twice --steps)")
      ->check(whole_number(1, 1000000));
  cmd.add_option("--spread", m.spread,
                 "How well each ratio to full must be known: half the interquartile range of its per-round ratios, "
                 "relative to their median")
      ->check(CLI::Range(0.0, 1.0).description("from 0 to 1"))
      ->capture_default_str();
  cmd.add_option("--warmup", m.warmup, "Untimed steps before them")
      ->check(whole_number(0, 1000000))
      ->capture_default_str();
}

void setup_matrix(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("matrix", "Run the model x strategy x shape matrix and record it in HDF5");
  o->decided_by_weights.push_back(cmd->add_option("--models", o->models, "Comma-separated models: " + [] {
    std::string s;
    for (const auto& n : models().names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }())->capture_default_str());
  cmd->add_option("--strategies", o->matrix.strategies, "'all' or a comma-separated list (see `remat strategies`)")
      ->capture_default_str();
  o->decided_by_weights.push_back(
      cmd->add_option("--preset", o->matrix.preset,
                      "Size preset (small here, sizes worth measuring; check, train and export default to "
                      "tiny, for an answer in seconds)")->check(CLI::IsMember(preset_names()))->capture_default_str());
  o->config_option = cmd->add_option("--config", o->matrix.config,
                                     "A published configuration instead of a preset, at real size (docs/models.md: "
                                     "e.g. llama-7b); its model alone, S its S_max and B 1 unless swept")
                          ->check(CLI::IsMember(config_names()));
  o->decided_by_weights.push_back(o->config_option);
  o->decided_by_weights.push_back(cmd->add_option("--layers", o->matrix.layers, "Blocks L to sweep (comma-separated)")
                                      ->delimiter(',')
                                      ->check(whole_number(1, 1 << 16)));
  cmd->add_option("--weights", o->matrix.weights,
                  "Run every cell on these weights: a weight file or a Hugging Face model folder (docs/weight-files.md), "
                  "whose model and sizes they are (--seq and --batch still sweep)");
  cmd->add_option("--seq", o->matrix.seq, "Sequence lengths S to sweep")->delimiter(',')->check(whole_number(1, 1 << 20));
  cmd->add_option("--batch", o->matrix.batch, "Batch sizes B to sweep")->delimiter(',')->check(whole_number(1, 1 << 16));
  add_timing_options(*cmd, o->matrix);
  add_tp_options(*cmd, o->tp, o->sp);
  add_ep_option(*cmd, o->ep);
  add_cp_option(*cmd, o->cp);
  add_fine_tuning_options(*cmd, o->matrix.finetune);
  quantized_precision_default(*cmd, o->matrix.finetune.quantize, o->matrix.precisions);
  add_router_aux_option(*cmd, o->matrix.router_aux);
  cmd->add_option("--dropout", o->matrix.dropout, "Dropout probability (masks replay exactly under recomputation)")
      ->check(CLI::Range(0.0, 0.99).description("from 0 to 0.99"));
  cmd->add_option("--data", o->matrix.data, "Batch source: random, copy, reverse, text:PATH, h5:PATH[:DATASET]")
      ->capture_default_str();
  add_attention_option(*cmd, o->matrix.attention);
  add_precisions_option(*cmd, o->matrix.precisions,
                        "Precisions to run each cell at, compared each with full at the same precision: fp32, "
                        "bf16, fp16 (comma-separated: an axis of the matrix; docs/precision.md)");
  add_seed_option(*cmd, o->matrix.seed, "Seed of weights, batch and dropout");
  cmd->add_option("--out", o->matrix.out, "HDF5 results file (appended to)")->capture_default_str();
  cmd->add_option("--mem-limit", o->matrix.mem_limit,
                  "Simulate a device of this many bytes (e.g. 512M, 2G): a run that needs more is recorded as OOM")
      ->transform(byte_size());
  cmd->add_flag("--resume", o->matrix.resume, "Skip runs already in the results file (those with the same options)");
  o->shard_option = cmd->add_option("--shard", o->shard,
                  "Run only shard i of n (i/n, i from 0): the i-th of n consecutive runs of about equal work, for job arrays; "
                  "join the parts with `remat merge`")
                          ->type_name("I/N");  // checked by the matrix itself, "" included
  cmd->add_flag("--force", o->matrix.force, "Run even where the memory estimate says a shape will not fit");
  cmd->callback([o] { run(*o); });
}

namespace {
const RegisterCommand register_matrix(60, setup_matrix);
}  // namespace

}  // namespace remat::cli
