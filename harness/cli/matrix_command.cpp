// remat matrix: the strategy comparison matrix, recorded in HDF5, with a
// progress line and a summary table.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "autodiff/runtime.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/model_options.hpp"
#include "harness/matrix.hpp"
#include "harness/step.hpp"
#include "strategies/registry.hpp"
#include "strategies/trace.hpp"

namespace remat::cli {
namespace {

struct Options {
  MatrixOptions matrix;
  std::string models = "gpt2", attention = "fused";
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find(',', start), s.size());
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string duration(double s) {
  char buf[32];
  if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%.0fs", s);
  return buf;
}

void print_summary(const std::vector<RunRecord>& records) {
  std::printf("\n%-8s %-28s %-14s %9s %9s %9s %9s %7s %9s %8s %7s\n", "model", "strategy", "shape", "step s",
              "tokens/s", "act MB", "pred MB", "vs full", "offl. MB", "recomp.", "bitwise");
  std::map<std::string, double> full_time;
  for (const auto& r : records)
    if (r.strategy == "full") full_time[ResultsFile::run_id(r.model, "", r.sizes)] = median(r.step_times);
  for (const auto& r : records) {
    if (r.check.oom) {
      std::printf("%-8s %-28s L%d S%d B%d: OUT OF MEMORY under --mem-limit\n", r.model.c_str(), r.strategy.c_str(),
                  r.sizes.L, r.sizes.S, r.sizes.B);
      continue;
    }
    const double t = median(r.step_times);
    const auto& st = r.check.step;
    const auto ft = full_time.find(ResultsFile::run_id(r.model, "", r.sizes));
    char shape[32], vs[16] = "-";
    std::snprintf(shape, sizeof shape, "L%d S%d B%d", r.sizes.L, r.sizes.S, r.sizes.B);
    if (ft != full_time.end() && ft->second > 0) std::snprintf(vs, sizeof vs, "%.2fx", t / ft->second);
    std::printf("%-8s %-28s %-14s %9.3f %9.0f %9.1f %9.1f %7s %9.1f %7.1f%% %7s\n", r.model.c_str(), r.strategy.c_str(),
                shape, t, double(r.sizes.B) * r.sizes.S / t, st.activation_peak / 1048576.0,
                r.check.predicted.device / 1048576.0, vs, st.offload_peak / 1048576.0,
                st.flops > 0 ? 100 * st.recompute_flops / st.flops : 0.0, r.check.vs_full.bitwise ? "yes" : "NO");
  }
  std::printf("vs full: step time relative to full on the same model and shape (time overhead of the strategy).\n");
}

void run(Options& o) {
  o.matrix.models = split(o.models);
  const auto cells = matrix_cells(o.matrix);
  std::printf("remat matrix: %zu runs (%s x strategies %s), preset %s, %d warm-up + %d timed steps, %s -> %s\n",
              cells.size(), o.models.c_str(), o.matrix.strategies.c_str(), o.matrix.preset.c_str(), o.matrix.warmup,
              o.matrix.steps, Runtime::describe().c_str(), o.matrix.out.c_str());
  std::fflush(stdout);
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  MatrixProgress progress;
  progress.update = [&](std::size_t done, std::size_t total, const MatrixCell& cell, const std::string& what) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string eta = done ? duration(elapsed / double(done) * double(total - done)) : "?";
    if (tty) {
      const int width = 24, filled = int(width * done / std::max<std::size_t>(total, 1));
      std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu  %s: %s  ETA %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total, cell.id.c_str(), what.c_str(), eta.c_str());
    } else if (what == "warm-up" || what == "checking against full") {
      std::fprintf(stderr, "[%zu/%zu] %s: %s (ETA %s)\n", done + 1, total, cell.id.c_str(), what.c_str(), eta.c_str());
    }
  };
  const auto records = run_matrix(o.matrix, progress);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (records.empty()) std::printf("nothing to run: every run is already in %s\n", o.matrix.out.c_str());
  else print_summary(records);
  std::printf("wrote %zu runs to %s\n", records.size(), o.matrix.out.c_str());
}

}  // namespace

void setup_matrix(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("matrix", "Run the model x strategy x shape matrix and record it in HDF5");
  cmd->add_option("--models", o->models, "Comma-separated models: " + [] {
    std::string s;
    for (const auto& n : models().names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }())->capture_default_str();
  cmd->add_option("--strategies", o->matrix.strategies, "'all' or a comma-separated list (see `remat strategies`)")
      ->capture_default_str();
  cmd->add_option("--preset", o->matrix.preset, "Size preset")->check(CLI::IsMember(preset_names()))->capture_default_str();
  cmd->add_option("--layers", o->matrix.layers, "Blocks L to sweep (comma-separated)")->delimiter(',');
  cmd->add_option("--seq", o->matrix.seq, "Sequence lengths S to sweep")->delimiter(',');
  cmd->add_option("--batch", o->matrix.batch, "Batch sizes B to sweep")->delimiter(',');
  cmd->add_option("--steps", o->matrix.steps, "Timed steps per run")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", o->matrix.warmup, "Untimed steps before them")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--data", o->matrix.data, "Batch source: random, copy, reverse, text:PATH, h5:PATH[:DATASET]")
      ->capture_default_str();
  add_attention_option(*cmd, o->attention);
  cmd->add_option("--seed", o->matrix.seed, "Seed of weights, batch and dropout")->capture_default_str();
  cmd->add_option("--out", o->matrix.out, "HDF5 results file (appended to)")->capture_default_str();
  cmd->add_option("--mem-limit", o->matrix.mem_limit,
                  "Simulate a device of this many bytes (suffixes k, M, G): a run that needs more is recorded as OOM")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_flag("--resume", o->matrix.resume, "Skip runs already in the results file");
  cmd->callback([o] { run(*o); });
}

}  // namespace remat::cli
