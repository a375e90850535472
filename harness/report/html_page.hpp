#pragma once
// One self-contained HTML page from a report: its Markdown (headings,
// tables, lists, paragraphs) as HTML, the SVG plots inline, and the facts a
// reader needs about where the numbers came from. No script, style sheet or
// image is fetched from anywhere: the page opens offline in any browser.
#include <string>
#include <utility>
#include <vector>

namespace remat {

struct HtmlPage {
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // (what, value): files, version, backend, date
  std::string markdown;                                     // the report as `remat report` prints it
  std::vector<std::pair<std::string, std::string>> plots;   // (file name, SVG text)
};

std::string render_html(const HtmlPage& page);

// The subset of Markdown the reports write, as HTML (exposed for tests).
std::string markdown_to_html(const std::string& markdown);

}  // namespace remat
