#include "harness/report/html_page.hpp"

#include "core/text.hpp"

#include <sstream>

namespace remat {
namespace {

// `code` spans as <code>, the rest escaped.
std::string inline_text(const std::string& s) {
  std::string o;
  bool code = false;
  std::size_t from = 0;
  for (std::size_t at = s.find('`'); at != std::string::npos; at = s.find('`', from)) {
    o += xml_escape(s.substr(from, at - from)) + (code ? "</code>" : "<code>");
    code = !code;
    from = at + 1;
  }
  o += xml_escape(s.substr(from));
  if (code) o += "</code>";
  return o;
}

std::vector<std::string> cells_of(const std::string& row) {
  std::vector<std::string> cells;
  std::string inner = row.substr(1, row.size() > 1 && row.back() == '|' ? row.size() - 2 : row.size() - 1);
  std::size_t from = 0;
  for (;;) {
    const std::size_t bar = inner.find('|', from);
    std::string cell = inner.substr(from, bar == std::string::npos ? std::string::npos : bar - from);
    const auto a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
    cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    if (bar == std::string::npos) break;
    from = bar + 1;
  }
  return cells;
}

bool is_separator(const std::string& row) { return row.find_first_not_of("|-: ") == std::string::npos; }

}  // namespace

std::string markdown_to_html(const std::string& markdown) {
  std::ostringstream o;
  std::istringstream in(markdown);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (std::size_t i = 0; i < lines.size();) {
    const std::string& line = lines[i];
    if (line.empty()) {
      ++i;
    } else if (line[0] == '#') {
      const std::size_t level = line.find_first_not_of('#');
      o << "<h" << level << ">" << inline_text(line.substr(line.find_first_not_of(' ', level))) << "</h" << level
        << ">\n";
      ++i;
    } else if (line[0] == '|') {
      o << "<table>\n";
      bool head = i + 1 < lines.size() && is_separator(lines[i + 1]);
      for (; i < lines.size() && !lines[i].empty() && lines[i][0] == '|'; ++i) {
        if (is_separator(lines[i])) continue;
        const char* tag = head ? "th" : "td";
        o << "<tr>";
        for (const auto& c : cells_of(lines[i])) o << "<" << tag << ">" << inline_text(c) << "</" << tag << ">";
        o << "</tr>\n";
        head = false;
      }
      o << "</table>\n";
    } else if (line.rfind("- ", 0) == 0) {
      o << "<ul>\n";
      for (; i < lines.size() && lines[i].rfind("- ", 0) == 0; ++i) o << "<li>" << inline_text(lines[i].substr(2)) << "</li>\n";
      o << "</ul>\n";
    } else {
      o << "<p>";
      for (; i < lines.size() && !lines[i].empty() && lines[i][0] != '#' && lines[i][0] != '|' &&
             lines[i].rfind("- ", 0) != 0;
           ++i)
        o << inline_text(lines[i]) << "\n";
      o << "</p>\n";
    }
  }
  return o.str();
}

std::string render_html(const HtmlPage& page) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << xml_escape(page.title)
    << "</title>\n<style>\n"
    << "body { font-family: sans-serif; margin: 2em; color: #222; }\n"
    << "table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }\n"
    << "th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }\n"
    << "th:first-child, td:first-child { text-align: left; }\n"
    << "th { background: #f2f2f2; }\n"
    // Nothing wider than the window: plots scale down to its width (their
    // viewBox keeps them sharp), a wide table scrolls inside itself.
    << "figure { margin: 1.5em 0; }\n"
    << "figure svg { display: block; max-width: 100%; height: auto; }\n"
    << "table { display: block; max-width: 100%; overflow-x: auto; }\n"
    << "dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; }\n"
    << "dl.facts dt { font-weight: bold; }\n"
    << "</style>\n</head>\n<body>\n<h1>" << xml_escape(page.title) << "</h1>\n<dl class=\"facts\">\n";
  for (const auto& [what, value] : page.facts) o << "<dt>" << xml_escape(what) << "</dt><dd>" << xml_escape(value) << "</dd>\n";
  o << "</dl>\n<section class=\"report\">\n" << markdown_to_html(page.markdown) << "</section>\n";
  if (!page.plots.empty()) {
    o << "<h2>Plots</h2>\n";
    for (const auto& [name, svg] : page.plots) {
      // The SVG inline, as written to its file (no XML declaration to strip).
      o << "<figure class=\"plot\" id=\"" << xml_escape(name) << "\">\n" << svg << "<figcaption>" << xml_escape(name)
        << "</figcaption>\n</figure>\n";
    }
  }
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace remat
