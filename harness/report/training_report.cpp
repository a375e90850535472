#include "harness/report/training_report.hpp"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "autodiff/error.hpp"
#include "h5/atomic_file.hpp"
#include "harness/report/svg_chart.hpp"
#include "harness/step.hpp"
#include "harness/train/run_file.hpp"

namespace remat {

std::string training_summary(const std::vector<std::string>& run_files) {
  std::ostringstream o;
  o << "\n## training runs\n\n| run | model | strategy | steps | final loss | best validation | median step s | "
       "tokens/s | activation MB |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& path : run_files) {
    const SavedRun run = read_run_record(path);
    const TrainConfig& c = run.config;
    const TrainState& s = run.state;
    std::vector<double> times;
    std::int64_t peak = 0;
    for (const auto& r : s.history) {
      times.push_back(r.seconds);
      peak = std::max(peak, r.activation_peak);
    }
    double best = 0;
    for (const auto& e : s.evals) best = best == 0 ? e.loss : std::min(best, e.loss);
    const double t = median(times);
    char buf[512];
    std::snprintf(buf, sizeof buf, "| %s | %s L%d D%d S%d B%d | %s | %d/%d | %s | %s | %.3f | %.0f | %.1f |\n",
                  path.c_str(), c.setup.model.c_str(), c.setup.sizes.L, c.setup.sizes.D, c.setup.sizes.S,
                  c.setup.sizes.B, c.strategy.c_str(), s.step, c.steps,
                  s.history.empty() ? "-" : std::to_string(s.history.back().loss).substr(0, 6).c_str(),
                  s.evals.empty() ? "-" : std::to_string(best).substr(0, 6).c_str(), t,
                  t > 0 ? double(c.setup.sizes.B) * c.setup.sizes.S * c.accumulate / t : 0.0, double(peak) / (1 << 20));
    o << buf;
  }
  return o.str();
}

std::string write_loss_plot(const std::vector<std::string>& run_files, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
  svg::Chart chart{"loss per step", "step", "loss (nats)", false, false, {}};
  for (const auto& path : run_files) {
    const SavedRun run = read_run_record(path);
    const std::string name = std::filesystem::path(path).stem().string() + " (" + run.config.strategy + ")";
    svg::Series train{name + " train", {}, {}};
    for (std::size_t i = 0; i < run.state.history.size(); ++i) {
      train.x.push_back(double(i + 1));
      train.y.push_back(run.state.history[i].loss);
    }
    chart.series.push_back(train);
    if (!run.state.evals.empty()) {
      svg::Series val{name + " validation", {}, {}, true, true, true};
      for (const auto& e : run.state.evals) {
        val.x.push_back(e.step);
        val.y.push_back(e.loss);
      }
      chart.series.push_back(val);
    }
  }
  const std::string out = dir + "/loss.svg";
  write_file_atomically(out, svg::render("Training and validation loss", {chart}));
  return out;
}

}  // namespace remat
