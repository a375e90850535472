#include "harness/report/training_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "core/text.hpp"
#include "h5/atomic_file.hpp"
#include "harness/report/pipeline_chart.hpp"
#include "harness/report/svg_chart.hpp"
#include "pipeline/schedule.hpp"
#include "step/step.hpp"
#include "train/run_file.hpp"

namespace remat {
namespace {

// One run's figures per rank.
struct RankFigures {
  double step_seconds = 0;      // median
  double activation_mb = 0;     // the largest step's activation peak
  double memory_mb = 0;         // parameters, gradients, optimizer state, and the gathered, reducing and activation peaks (added: a bound)
  double comm_mb = 0;           // last step's bytes sent plus received
  double predicted_comm_mb = 0;
};

RankFigures rank_figures(const SavedRun& run) {
  RankFigures f;
  std::vector<double> times;
  std::int64_t peak = 0;
  for (const auto& r : run.state.history) {
    times.push_back(r.seconds);
    peak = std::max(peak, r.activation_peak);
  }
  f.step_seconds = median(times);
  f.activation_mb = double(peak) / (1 << 20);
  const RankMemory& m = run.state.memory;
  f.memory_mb = double(m.parameters + m.gradients + m.optimizer + m.gathered_peak + m.reducing_peak + peak) / (1 << 20);
  if (!run.state.history.empty()) {
    f.comm_mb = double(run.state.history.back().comm_bytes) / (1 << 20);
    f.predicted_comm_mb = double(run.state.history.back().predicted_comm_bytes) / (1 << 20);
  }
  return f;
}

std::string run_label(const std::string& path, const TrainConfig& c) {
  return std::filesystem::path(path).stem().string() + " (" + c.strategy + (c.shard_params ? ", sharded" : "") + ")";
}

// A pipelined step's micro-batches: its first stage's forward passes.
int micro_batches_of(const std::vector<std::vector<pipeline::PassTiming>>& stages) {
  int forwards = 0;
  for (const auto& p : stages.front()) forwards += p.pass.kind == pipeline::PassKind::forward ? 1 : 0;
  return forwards;
}

// The formula a pipelined step's measured bubble stands beside: 1F1B's, or
// zb-h1's where the step has W passes.
std::string bubble_formula_text(const std::vector<std::vector<pipeline::PassTiming>>& stages, int M) {
  bool split = false;
  for (const auto& stage : stages)
    for (const auto& p : stage) split = split || p.pass.kind == pipeline::PassKind::weight;
  return std::string(split ? "(p-1)/(3M+p-1)" : "(p-1)/(M+p-1)") + " = " +
         fixed(100 * pipeline::bubble_formula(int(stages.size()), M, split), 1) + "%";
}

// Under the table, a line per pipelined run: its last step's measured bubble beside the schedule's formula.
std::string pipeline_lines(const std::vector<std::string>& run_files) {
  std::string out;
  for (const auto& path : run_files) {
    const auto stages = read_run_record(path).state.pipeline_passes;
    if (stages.empty()) continue;
    const int N = int(stages.size()), M = micro_batches_of(stages);
    out += "\n" + path + ": pipelined over " + std::to_string(N) + " stages, " + std::to_string(M) +
           " micro-batches; the last step's bubble (the stages' idle share of its span) measured " +
           fixed(100 * measured_bubble(stages), 1) + "%, against " + bubble_formula_text(stages, M) +
           " for passes of equal length\n";
  }
  return out;
}

}  // namespace

std::string training_summary(const std::vector<std::string>& run_files) {
  std::ostringstream o;
  o << "\n## training runs\n\n| run | model | strategy | steps | final loss | loss parts | best validation | median step s | "
       "tokens/s | activation MiB | ranks | memory/rank MiB | comm MiB/step (predicted) | precision |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& path : run_files) {
    const SavedRun run = read_run_record(path);
    const TrainConfig& c = run.config;
    const TrainState& s = run.state;
    double best = 0;
    for (const auto& e : s.evals) best = best == 0 ? e.loss : std::min(best, e.loss);
    const RankFigures f = rank_figures(run);
    const double t = f.step_seconds;
    std::string parts;  // the last step's (mixtral: ce and aux)
    if (!s.history.empty())
      for (const auto& [name, value] : s.history.back().loss_parts) {
        char part[64];
        std::snprintf(part, sizeof part, "%s%s %.4f", parts.empty() ? "" : ", ", name.c_str(), value);
        parts += part;
      }
    std::string precision = precision_name(c.run.precision);  // fp16: and the steps its loss scale skipped
    if (c.run.precision == Precision::fp16) {
      int skipped = 0;
      for (const auto& r : s.history) skipped += r.skipped ? 1 : 0;
      precision += " (" + std::to_string(skipped) + " skipped)";
    }
    char buf[768];
    std::snprintf(buf, sizeof buf,
                  "| %s | %s L%d D%d S%d B%d | %s | %d/%d | %s | %s | %s | %.3f | %.0f | %.1f | %d%s | %.1f | %.2f (%.2f) | %s |\n",
                  path.c_str(), c.setup.model.c_str(), c.setup.sizes.L, c.setup.sizes.D, c.setup.sizes.S,
                  c.setup.sizes.B, c.strategy.c_str(), s.step, c.steps,
                  s.history.empty() ? "-" : fixed(s.history.back().loss, 4).c_str(),
                  parts.empty() ? "-" : parts.c_str(),
                  s.evals.empty() ? "-" : fixed(best, 4).c_str(), t,
                  t > 0 ? double(c.setup.sizes.B) * c.setup.sizes.S * c.accumulate / t : 0.0, f.activation_mb,
                  c.ranks, c.shard_params ? " sharded" : "", f.memory_mb, f.comm_mb, f.predicted_comm_mb, precision.c_str());
    o << buf;
  }
  o << pipeline_lines(run_files);
  return o.str();
}

std::string write_pipeline_plot(const std::vector<std::string>& run_files, const std::string& dir) {
  for (const auto& path : run_files) {  // the first pipelined run's last step
    const SavedRun run = read_run_record(path);
    const auto& stages = run.state.pipeline_passes;
    if (stages.empty()) continue;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
    const std::string out = dir + "/pipeline.svg";
    const int M = micro_batches_of(stages);
    write_file_atomically(out, pipeline_svg(std::filesystem::path(path).filename().string() + ": the last step over " +
                                                std::to_string(stages.size()) + " stages, " + std::to_string(M) +
                                                " micro-batches (bubble " + fixed(100 * measured_bubble(stages), 1) +
                                                "%; " + bubble_formula_text(stages, M) + ")",
                                            stages));
    return out;
  }
  return "";
}

std::string write_loss_plot(const std::vector<std::string>& run_files, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
  svg::Chart chart{"loss per step", "step", "loss (nats)", false, false, {}};
  bool validated = false;
  std::vector<std::int64_t> vocabularies;  // one ln V line per vocabulary size
  double last_step = 1;
  for (const auto& path : run_files) {
    const SavedRun run = read_run_record(path);
    const std::string name = run_label(path, run.config);
    svg::Series train{name + " train", {}, {}};
    for (std::size_t i = 0; i < run.state.history.size(); ++i) {
      train.x.push_back(double(i + 1));
      train.y.push_back(run.state.history[i].loss);
    }
    chart.series.push_back(train);
    last_step = std::max(last_step, double(run.state.history.size()));
    const std::int64_t V = run.config.setup.sizes.V;
    if (std::find(vocabularies.begin(), vocabularies.end(), V) == vocabularies.end()) vocabularies.push_back(V);
    // Where each new pass over a finite data source began (its file, if it is
    // still there, says how many batches a pass holds).
    std::uint64_t pass = 0;
    try {
      const Sizes& z = run.config.setup.sizes;
      pass = make_batch_source(run.config.data, z.B, z.S, z.V, run.config.run.seed, DataSplit::train)->epoch_batches();
    } catch (const UserError&) {
      pass = 0;  // the file is gone or changed: no marks rather than wrong ones
    }
    const std::uint64_t per_step = std::uint64_t(run.config.accumulate) * std::uint64_t(run.config.ranks);
    if (pass > 0 && per_step > 0) {
      svg::Series marks{name + ": a new pass over " + run.config.data + " begins", {}, {}, false, true};
      for (std::uint64_t b = pass; b / per_step < run.state.history.size(); b += pass) {
        const std::size_t step = std::size_t(b / per_step);  // the step that reads batch b
        marks.x.push_back(double(step + 1));
        marks.y.push_back(run.state.history[step].loss);
      }
      if (!marks.x.empty()) chart.series.push_back(marks);
    }
    if (!run.state.evals.empty()) {
      validated = true;
      svg::Series val{name + " validation", {}, {}, true, true, true};
      for (const auto& e : run.state.evals) {
        val.x.push_back(e.step);
        val.y.push_back(e.loss);
      }
      chart.series.push_back(val);
    }
  }
  // The loss of guessing uniformly: a curve that stays on it learned nothing.
  for (const std::int64_t V : vocabularies) {
    char label[64];  // short enough for one legend line
    std::snprintf(label, sizeof label, "ln V = %.2f (uniform guess)", std::log(double(V)));
    chart.series.push_back({label, {1, last_step}, {std::log(double(V)), std::log(double(V))}, true, false, true});
  }
  const std::string out = dir + "/loss.svg";
  write_file_atomically(out, svg::render(validated ? "Training and validation loss" : "Training loss", {chart}));
  return out;
}

std::string write_expert_plot(const std::vector<std::string>& run_files, const std::string& dir) {
  std::vector<svg::Chart> panels;
  for (const auto& path : run_files) {
    const SavedRun run = read_run_record(path);
    const auto& h = run.state.history;
    if (h.empty()) continue;
    const auto stat = std::find_if(h.front().stats.begin(), h.front().stats.end(),
                                   [](const Statistic& s) { return s.name == "expert_load"; });
    if (stat == h.front().stats.end() || stat->shape.size() != 2) continue;
    const std::size_t k = std::size_t(stat - h.front().stats.begin());
    const std::int64_t L = stat->shape[0], E = stat->shape[1];
    for (std::int64_t l = 0; l < L; ++l) {
      svg::Chart c{run_label(path, run.config) + ", layer " + std::to_string(l), "step", "share of routed rows", false,
                   false, {}};
      for (std::int64_t e = 0; e < E; ++e) {
        svg::Series expert{"expert " + std::to_string(e), {}, {}};
        for (std::size_t i = 0; i < h.size(); ++i) {
          const auto& v = h[i].stats.at(k).values;
          double rows = 0;
          for (std::int64_t f = 0; f < E; ++f) rows += v[std::size_t(l * E + f)];
          expert.x.push_back(double(i + 1));
          expert.y.push_back(rows > 0 ? v[std::size_t(l * E + e)] / rows : 0);
        }
        c.series.push_back(std::move(expert));
      }
      panels.push_back(std::move(c));
    }
  }
  if (panels.empty()) return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
  const std::string out = dir + "/experts.svg";
  write_file_atomically(out, svg::render("Tokens routed to each expert, per layer (1/E each when balanced)", panels));
  return out;
}

std::string write_rank_plot(const std::vector<std::string>& run_files, const std::string& dir) {
  // Only runs of several processes have ranks to compare.
  std::vector<std::pair<std::string, SavedRun>> runs;
  for (const auto& path : run_files) {
    SavedRun run = read_run_record(path);
    if (run.config.ranks > 1) runs.emplace_back(path, std::move(run));
  }
  if (runs.empty()) return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
  svg::Chart time{"step time", "memory per rank (MiB)", "median step time (s)", false, false, {}};
  svg::Chart comm{"communication", "memory per rank (MiB)", "sent + received per step (MiB)", false, false, {}};
  for (const auto& [path, run] : runs) {
    const RankFigures f = rank_figures(run);
    const std::string name = run_label(path, run.config);
    time.series.push_back({name, {f.memory_mb}, {f.step_seconds}, false, true});
    comm.series.push_back({name, {f.memory_mb}, {f.comm_mb}, false, true});
  }
  const std::string out = dir + "/ranks.svg";
  write_file_atomically(out, svg::render("Memory per rank against step time and communication", {time, comm}));
  return out;
}

}  // namespace remat
