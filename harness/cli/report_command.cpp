// remat report: results files (from `remat matrix`) as a Markdown summary and
// SVG plots; training runs (from `remat train`) as a summary and their loss
// curves, overlaid; with --html, all of it as one self-contained page.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "autodiff/runtime.hpp"
#include "core/error.hpp"
#include "h5/atomic_file.hpp"
#include "harness/cli/commands.hpp"
#include "harness/io/output_guard.hpp"
#include "harness/report/html_page.hpp"
#include "harness/report/report.hpp"
#include "harness/report/training_report.hpp"

namespace remat::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> files;
  std::string svg, html;
  bool force = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A folder for the plots of an --html page without --svg, removed at the end.
class ScratchFolder {
 public:
  ScratchFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "remat-report-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw EnvironmentError("cannot create a temporary folder for the plots");
    path_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

void run_report(const ReportOptions& o) {
  if (!o.html.empty()) check_output(o.html, FileKind::html_report, o.files, o.force);  // ('' is refused as it is parsed)
  std::unique_ptr<ScratchFolder> scratch;
  if (!o.html.empty() && o.svg.empty()) scratch = std::make_unique<ScratchFolder>();
  const std::string plot_dir = scratch ? scratch->path() : o.svg;
  const bool speak_plots = !o.svg.empty();

  std::vector<std::string> results, runs, plots;
  for (const auto& f : o.files) (file_kind(f) == FileKind::training_run ? runs : results).push_back(f);
  std::string markdown;
  std::size_t run_count = 0;
  if (!results.empty()) {
    Results all;
    for (const auto& f : results) {
      Results r = read_results(f);
      all.runs.insert(all.runs.end(), r.runs.begin(), r.runs.end());
      all.damaged.insert(all.damaged.end(), r.damaged.begin(), r.damaged.end());
    }
    std::string names;
    for (const auto& f : results) names += (names.empty() ? "" : ", ") + f;
    run_count += all.runs.size();
    markdown += "# remat results: " + names + " (" + std::to_string(all.runs.size()) + " runs)\n" +
                markdown_summary(all);
    if (!all.damaged.empty())
      std::fprintf(stderr, "remat report: %zu damaged run(s) left out (listed at the end of the summary)\n",
                   all.damaged.size());
    if (!plot_dir.empty())
      for (const auto& f : write_plots(all.runs, plot_dir)) plots.push_back(f);
  }
  if (!runs.empty()) {
    markdown += training_summary(runs);
    run_count += runs.size();
    if (!plot_dir.empty()) {
      plots.push_back(write_loss_plot(runs, plot_dir));
      if (const std::string ranks = write_rank_plot(runs, plot_dir); !ranks.empty()) plots.push_back(ranks);
      if (const std::string experts = write_expert_plot(runs, plot_dir); !experts.empty()) plots.push_back(experts);
      if (const std::string pipe = write_pipeline_plot(runs, plot_dir); !pipe.empty()) plots.push_back(pipe);
    }
  }
  std::printf("%s", markdown.c_str());
  if (speak_plots)
    for (const auto& p : plots) std::printf("wrote %s\n", p.c_str());
  if (o.html.empty()) return;

  HtmlPage page;
  page.title = "remat report";
  std::string files;
  for (const auto& f : o.files) files += (files.empty() ? "" : ", ") + f;
  page.facts = {{"files", files},
                {"runs", std::to_string(run_count)},
                {"written by", Runtime::version()},
                {"on", Runtime::describe()},
                {"at", utc_now()}};
  page.markdown = markdown;
  for (const auto& p : plots) page.plots.push_back({std::filesystem::path(p).filename().string(), read_text(p)});
  write_file_atomically(o.html, render_html(page));
  std::size_t tables = 0;
  for (std::size_t at = markdown.find("\n|---"); at != std::string::npos; at = markdown.find("\n|---", at + 1)) ++tables;
  std::printf("wrote %s: one page, %zu tables and %zu plots inline\n", o.html.c_str(), tables, plots.size());
}

}  // namespace

void setup_report(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand("report", "Summarise results files or training runs as Markdown, and plot them as SVG");
  cmd->add_option("files", o->files, "HDF5 results files (remat matrix) or training runs (remat train)")->required();
  cmd->add_option("--svg", o->svg,
                  "Write plots into this folder: tradeoff.svg, timeline-<model>.svg, depth.svg for results; "
                  "loss.svg, ranks.svg (memory per rank against step time and communication) and, for a mixture of "
                  "experts, experts.svg (each expert's share of the routed tokens per layer) for training runs");
  cmd->add_option("--html", o->html,
                  "Also write the whole report as one self-contained HTML page: the tables, every plot inline, what "
                  "was read and by what (nothing fetched from the network; open it in any browser)");
  cmd->add_flag("--force", o->force, "Write the --html page over a file that is not a report page");
  cmd->callback([o] { run_report(*o); });
}

namespace {
const RegisterCommand register_report(70, setup_report);
}  // namespace

}  // namespace remat::cli
