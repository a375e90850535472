// remat report: a results file as a Markdown summary and SVG plots.
#include <cstdio>
#include <memory>

#include "harness/cli/commands.hpp"
#include "harness/report/report.hpp"

namespace remat::cli {

void setup_report(CLI::App& app) {
  struct Options {
    std::string results, svg;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("report", "Summarise a results file as Markdown, and plot it as SVG");
  cmd->add_option("results", o->results, "HDF5 results file written by `remat matrix`")->required();
  cmd->add_option("--svg", o->svg, "Write tradeoff.svg, timeline-<model>.svg and depth.svg into this folder");
  cmd->callback([o] {
    const auto results = read_results(o->results);
    std::printf("# remat results: %s (%zu runs)\n%s", o->results.c_str(), results.runs.size(),
                markdown_summary(results).c_str());
    if (!results.damaged.empty())
      std::fprintf(stderr, "remat report: %zu damaged run(s) left out (listed at the end of the summary)\n",
                   results.damaged.size());
    if (!o->svg.empty())
      for (const auto& f : write_plots(results.runs, o->svg)) std::printf("wrote %s\n", f.c_str());
  });
}

}  // namespace remat::cli
