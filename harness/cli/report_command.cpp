// remat report: results files (from `remat matrix`) as a Markdown summary and
// SVG plots; training runs (from `remat train`) as a summary and their loss
// curves, overlaid.
#include <cstdio>
#include <memory>

#include "core/error.hpp"
#include "harness/cli/commands.hpp"
#include "harness/io/output_guard.hpp"
#include "harness/report/report.hpp"
#include "harness/report/training_report.hpp"

namespace remat::cli {

void setup_report(CLI::App& app) {
  struct Options {
    std::vector<std::string> files;
    std::string svg;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("report", "Summarise results files or training runs as Markdown, and plot them as SVG");
  cmd->add_option("files", o->files, "HDF5 results files (remat matrix) or training runs (remat train)")->required();
  cmd->add_option("--svg", o->svg,
                  "Write plots into this folder: tradeoff.svg, timeline-<model>.svg, depth.svg for results; "
                  "loss.svg, ranks.svg (memory per rank against step time and communication) and, for a mixture of "
                  "experts, experts.svg (each expert's share of the routed tokens per layer) for training runs");
  cmd->callback([o] {
    std::vector<std::string> results, runs;
    for (const auto& f : o->files) (file_kind(f) == FileKind::training_run ? runs : results).push_back(f);
    if (!results.empty()) {
      Results all;
      for (const auto& f : results) {
        Results r = read_results(f);
        all.runs.insert(all.runs.end(), r.runs.begin(), r.runs.end());
        all.damaged.insert(all.damaged.end(), r.damaged.begin(), r.damaged.end());
      }
      std::string names;
      for (const auto& f : results) names += (names.empty() ? "" : ", ") + f;
      std::printf("# remat results: %s (%zu runs)\n%s", names.c_str(), all.runs.size(), markdown_summary(all).c_str());
      if (!all.damaged.empty())
        std::fprintf(stderr, "remat report: %zu damaged run(s) left out (listed at the end of the summary)\n",
                     all.damaged.size());
      if (!o->svg.empty())
        for (const auto& f : write_plots(all.runs, o->svg)) std::printf("wrote %s\n", f.c_str());
    }
    if (!runs.empty()) {
      std::printf("%s", training_summary(runs).c_str());
      if (!o->svg.empty()) {
        std::printf("wrote %s\n", write_loss_plot(runs, o->svg).c_str());
        if (const std::string ranks = write_rank_plot(runs, o->svg); !ranks.empty())
          std::printf("wrote %s\n", ranks.c_str());
        const std::string experts = write_expert_plot(runs, o->svg);
        if (!experts.empty()) std::printf("wrote %s\n", experts.c_str());
      }
    }
  });
}

}  // namespace remat::cli
