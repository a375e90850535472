#include "harness/matrix.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "weights/weights_file.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "estimate/step_need.hpp"
#include "harness/io/output_guard.hpp"
#include "harness/io/run_collector.hpp"
#include "harness/long_run.hpp"
#include "harness/matrix_timing.hpp"
#include "harness/tensor_layout.hpp"
#include "step/probe.hpp"
#include "strategies/registry.hpp"
#include "zoo/configs.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

template <class T>
std::vector<T> unique_in_order(const std::vector<T>& v) {
  std::vector<T> out;
  for (const auto& x : v)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  return out;
}

bool same_shape(const RunKey& a, const RunKey& b) {
  return a.model == b.model && a.sizes.L == b.sizes.L && a.sizes.S == b.sizes.S && a.sizes.B == b.sizes.B &&
         a.run.precision == b.run.precision;
}

// The matrix's split over ranks on `model`'s sizes, refused in one line
// where the model cannot run it.
void split_sizes(const MatrixOptions& o, const std::string& model, const std::vector<std::string>& specs, Sizes& z) {
  z.tp = o.tp;
  z.ep = o.ep;
  z.cp = o.cp;
  if (z.cp.split()) cp::validate(model, z);
  if (z.tp.split() || z.tp.sequence) tp::validate(model, z);
  if (z.ep.split()) ep::validate(model, z);
  refuse_planned_under_experts(z, specs);
}

}  // namespace

std::vector<RunKey> matrix_cells(const MatrixOptions& o) {
  // The weights given decide the model and its sizes; else the preset does.
  // A published configuration (--config) is one model at fixed sizes, like a file.
  const ModelSetup file = !o.weights.empty() ? read_weights_setup(o.weights)
                          : !o.config.empty()
                              ? ModelSetup{published_config(o.config).model, o.config, published_config(o.config).sizes}
                              : ModelSetup{};
  const bool fixed = !o.weights.empty() || !o.config.empty();  // the sizes' S_max is not ours to move
  const Sizes base = fixed ? file.sizes : preset_sizes(o.preset);
  const std::string preset = fixed ? file.preset : o.preset;
  const auto kernel = o.attention;
  auto or_base = [](const std::vector<int>& v, int b) { return v.empty() ? std::vector<int>{b} : unique_in_order(v); };
  std::vector<RunKey> cells;
  for (const auto& model : fixed ? std::vector<std::string>{file.model} : unique_in_order(o.models)) {
    const auto specs = unique_in_order(strategies_for(model, o.strategies, kernel));
    for (int L : or_base(o.layers, base.L))
      for (int S : or_base(o.seq, base.S))
        for (int B : or_base(o.batch, base.B)) {
          Sizes z = base;
          z.L = L;
          z.S = S;
          if (!fixed) z.S_max = S;
          else if (S > z.S_max)
            throw UserError("--seq " + std::to_string(S) + ": " + (o.weights.empty() ? o.config : o.weights) +
                            " holds positions for " + std::to_string(z.S_max));
          z.B = B;
          z.dropout = o.dropout;
          z.router_aux = o.router_aux;
          validate(z);
          split_sizes(o, model, specs, z);
          make_batch_source(o.data, z.B, z.S, z.V, o.seed);  // a bad source fails now, not after hours
          // Weights, gradients and full's reference gradients, and the
          // activations of the hungriest strategy (full always runs).
          std::vector<std::string> with_full = specs;
          with_full.push_back("full");
          if (!o.force)  // (forced, the figure is of no use: no shape-only step)
            require_step_fits({model, preset, z}, kernel, with_full, 3,
                              model + " L" + std::to_string(L) + " S" + std::to_string(S) + " B" + std::to_string(B),
                              o.mem_limit, false);
          for (const Precision precision : unique_in_order(o.precisions)) {
            for (const auto& s : specs) {
              RunKey k{model, preset, s, o.data, {o.seed, kernel, precision}, z,
                       o.mem_limit, o.finetune.key(), o.finetune.label(), o.weights};
              cells.push_back(k);
            }
          }
        }
  }
  if (std::filesystem::exists(o.out)) check_results_schema(h5::File::open(o.out), true);  // a foreign file: refused untouched
  check_output(o.out, FileKind::results, {batch_source_file(o.data), o.weights}, false);
  return cells;
}

std::pair<int, int> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto bad = [&](const std::string& why) { return UserError("--shard " + text + ": " + why); };
  if (slash == std::string::npos) throw bad("expected i/n (this shard's index i from 0, of n shards)");
  // Digits only: stoi alone would take ' 0' or '+1'.
  const auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      throw bad("expected i/n with whole numbers");
    return std::stoi(s);
  };
  const int i = number(text.substr(0, slash)), n = number(text.substr(slash + 1));
  if (n < 1) throw bad("the number of shards must be at least 1");
  if (i < 0 || i >= n) throw bad("the index must be from 0 to " + std::to_string(n - 1));
  return {i, n};
}

namespace {

double estimated_work(const Sizes& z) {
  // GEMM FLOPs of a step, up to a constant: per token, the blocks' weights
  // (about 12 D^2 each), their attention (about 2 S D each) and the logits.
  const double per_token = double(z.L) * (12.0 * z.D * z.D + 2.0 * z.S * z.D) + double(z.V) * z.D;
  return double(z.B) * z.S * per_token;
}

}  // namespace

std::vector<int> deal_cells(const std::vector<RunKey>& cells, int shards) {
  double total = 0;
  for (const auto& c : cells) total += estimated_work(c.sizes);
  std::vector<int> shard_of;
  double before = 0;
  for (const auto& c : cells) {
    const double work = estimated_work(c.sizes);
    // The shard whose equal share of the work holds this cell's midpoint.
    const double middle = total > 0 ? (before + work / 2) / total : 0;
    shard_of.push_back(std::min(shards - 1, int(middle * shards)));
    before += work;
  }
  return shard_of;
}

std::vector<RunRecord> run_matrix(const MatrixOptions& o, const MatrixProgress& progress) {
  return run_matrix(o, matrix_cells(o), progress);
}

namespace {

// The cells this process runs (its shard's) that the file does not hold yet;
// a recorded one is refused unless --resume.
std::vector<const RunKey*> cells_to_run(const MatrixOptions& o, const std::vector<RunKey>& cells) {
  const ResultsFile file(o.out);
  // Under mpirun every rank is a shard, or each group of ranks that splits a
  // cell (comm's data group is the group's place); rank 0 writes (RunCollector).
  const bool mpi = comm::size() > 1;
  const int shard = mpi ? comm::rank(comm::Group::data) : o.shard;
  const int shards = mpi ? comm::size(comm::Group::data) : o.shards;
  const std::vector<int> shard_of = deal_cells(cells, shards);
  std::vector<const RunKey*> todo;
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const RunKey& c = cells[k];
    if (shard_of[k] != shard) continue;  // another shard's
    if (!file.has(c))
      todo.push_back(&c);
    else if (!o.resume)
      throw UserError(o.out + " already holds run '" + c.name() + "': pass --resume to skip recorded runs, or another --out");
  }
  // The ranks of a group must find the same cells to run: all read the file
  // before any run is written to it.
  if (comm::size(comm::Group::model) > 1) comm::barrier();
  return todo;
}

TimingOptions timing_options(const MatrixOptions& o) {
  TimingOptions t;
  t.warmup = o.warmup;
  t.min_rounds = o.steps;
  t.max_rounds = max_timed_steps(o);
  t.spread = o.spread;
  t.mem_limit = o.mem_limit;
  return t;
}

// One model and shape: weights, batch and the check of its strategies
// against full, which its cells share.
struct ShapeRun {
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamStore> params;
  Batch batch;
  RunSettings run;
  std::optional<SaveProfile> costs;  // one timed probe for the planned strategies, checked and timed alike
  CheckReport report;
};

ShapeRun check_shape(const MatrixOptions& o, const std::vector<const RunKey*>& group,
                     const std::function<void(const RunKey&, const std::string&)>& say) {
  const RunKey& first = *group.front();
  const Sizes& z = first.sizes;
  ShapeRun s;
  s.model = models().find(first.model).make(z);
  if (!o.weights.empty()) {
    s.params = std::move(load_weights(o.weights, o.force, /*skip_adapters=*/true).params);
  } else {
    // The whole model's weights, of which a split takes this rank's parts.
    s.params = std::make_unique<ParamStore>(models().find(first.model).make(z.whole_model())->params(), DType::f32);
    initialize(*s.params, o.seed, z.L);
  }
  if (z.tp.split() || z.ep.split()) take_rank_parts({first.model, first.preset, z}, s.params);
  s.batch = make_batch_source(o.data, z.B, z.S, z.V, o.seed)->next();
  apply_fine_tuning(s.params, *s.model, s.batch, o.finetune, o.seed, ModelSetup{first.model, first.preset, z});
  s.run = first.run;
  std::vector<std::string> specs;
  for (const auto* c : group) specs.push_back(c->strategy);
  // A shape whose runs come to more than about ten seconds says so, and
  // shows where each step is (rank 0 speaks for an MPI matrix).
  const LongRunNotice notice(
      ModelSetup{first.model, first.preset, z},
      std::int64_t(specs.size()) + 1 + std::int64_t(group.size()) * (o.warmup + max_timed_steps(o)),
      [&] { return step_need({first.model, first.preset, z}, first.run.attention, specs, first.run.precision).total(3); },
      comm::rank() == 0);
  say(first, "checking against full");
  for (const auto& spec : specs)
    if (!s.costs && parse_strategy(spec).planned) {
      say(first, "probing costs for the planner");
      PrecisionScope copies(*s.params, s.run.precision);
      s.costs = measure_costs(*s.model, *s.params, s.batch, o.attention, o.seed);
    }
  CheckOptions check;
  check.costs = s.costs ? &*s.costs : nullptr;
  check.run = s.run;
  check.timeline = true;
  check.mem_limit = o.mem_limit;
  s.report = run_check(*s.model, *s.params, s.batch, specs, check);
  return s;
}

// A shape's cells checked against full, then timed side by side.
std::vector<RunRecord> measure_shape(const MatrixOptions& o, const std::vector<const RunKey*>& group,
                                     const std::function<void(const RunKey&, const std::string&)>& say) {
  const ShapeRun shape = check_shape(o, group, say);
  std::vector<RunRecord> records;
  for (std::size_t k = 0; k < group.size(); ++k) {
    RunRecord r{*group[k], {}, {}, {}, false, shape.report.rows[k], shape.params->names(), {}};
    StepResult& step = r.check.step;  // under --cp: the group's loss, parts and statistics, not this rank's shares
    step.loss = whole_loss(*shape.model, step.loss);
    for (auto& part : step.loss_parts) part.second = whole_loss(*shape.model, part.second);
    for (auto& statistic : step.stats)
      for (double& v : statistic.values) v = whole_loss(*shape.model, v);
    for (std::size_t p = 0; p < shape.params->names().size(); ++p)
      if (!shape.params->trainable(p)) r.frozen.push_back(shape.params->names()[p]);
    records.push_back(std::move(r));
  }
  std::vector<RunRecord*> timed;
  for (auto& r : records) timed.push_back(&r);
  const TimingShape on{*shape.model, *shape.params, shape.batch, shape.run, shape.costs ? &*shape.costs : nullptr};
  const auto say_record = [&](const RunRecord& r, const std::string& what) { say(r.key, what); };
  time_interleaved(timing_options(o), on, timed, say_record);
  return records;
}

}  // namespace

std::vector<RunRecord> run_matrix(const MatrixOptions& o, const std::vector<RunKey>& cells,
                                  const MatrixProgress& progress) {
  const std::vector<const RunKey*> todo = cells_to_run(o, cells);
  RunCollector collector(o.out);
  std::vector<RunRecord> records;
  std::size_t done = 0;
  const auto say = [&](const RunKey& cell, const std::string& what) {
    if (progress.update) progress.update(done, todo.size(), cell, what);
  };
  // Cells sharing a model and shape share weights, batch and the full reference.
  for (std::size_t i = 0; i < todo.size();) {
    std::vector<const RunKey*> group;
    for (const RunKey& first = *todo[i]; i < todo.size() && same_shape(*todo[i], first);) group.push_back(todo[i++]);
    for (RunRecord& r : measure_shape(o, group, say)) {
      if (comm::rank(comm::Group::model) != 0) {  // a split cell's record is its group's first rank's
        ++done;
        continue;
      }
      bool appended = false;
      try {
        appended = collector.put(r);
      } catch (const UserError& e) {  // the file is as it was before this run: say what that holds
        throw UserError(std::string(e.what()) + ": run '" + r.key.name() + "' was not recorded; " + o.out +
                        " keeps every run recorded before it (" + std::to_string(records.size()) +
                        " of this matrix): free space and rerun with --resume to do the rest");
      }
      ++done;
      if (!appended) {
        say(r.key, "already recorded by another process; not appended");
        continue;
      }
      if (progress.finished) progress.finished(r);
      records.push_back(std::move(r));
    }
  }
  const std::size_t received = collector.finish();
  if (received && progress.update && !records.empty())
    progress.update(done, todo.size(), records.back().key, std::to_string(received) + " runs received from other ranks");
  return records;
}

int max_timed_steps(const MatrixOptions& o) {
  return std::max(o.steps, o.max_steps > 0 ? o.max_steps : 2 * o.steps);
}

}  // namespace remat
