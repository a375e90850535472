#include "harness/report/table.hpp"

#include <algorithm>
#include <cstdio>

#include "core/text.hpp"

namespace remat {
namespace {

std::string plain_text(const Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c)) return *s;
  if (const auto* b = std::get_if<bool>(&c)) return *b ? "yes" : "no";
  if (const auto* i = std::get_if<std::int64_t>(&c)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&c)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *d);
    return buf;
  }
  return "";
}

}  // namespace

double number(const Cell& c) {
  if (const auto* i = std::get_if<std::int64_t>(&c)) return double(*i);
  if (const auto* d = std::get_if<double>(&c)) return *d;
  return 0;
}

std::function<std::string(const Cell&)> decimals(int decimals, double scale) {
  return [decimals, scale](const Cell& c) { return fixed(number(c) / scale, decimals); };
}

std::function<std::string(const Cell&)> percent(int decimals) {
  return [decimals](const Cell& c) { return fixed(100 * number(c), decimals) + "%"; };
}

std::string render_text(const Table& t) {
  std::vector<std::size_t> shown;
  for (std::size_t c = 0; c < t.columns.size(); ++c)
    if (!t.columns[c].header.empty()) shown.push_back(c);
  std::vector<std::vector<std::string>> lines(1);
  for (std::size_t c : shown) lines[0].push_back(t.columns[c].header);
  for (const auto& row : t.rows) {
    lines.emplace_back();
    for (std::size_t c : shown) {
      const Column& col = t.columns[c];
      lines.back().push_back(std::holds_alternative<std::monostate>(row[c]) ? "" : col.text ? col.text(row[c]) : plain_text(row[c]));
    }
  }
  std::vector<std::size_t> width(shown.size(), 0);
  for (const auto& line : lines)
    for (std::size_t k = 0; k < line.size(); ++k) width[k] = std::max(width[k], line[k].size());
  std::string out;
  for (const auto& line : lines) {
    std::string text;
    for (std::size_t k = 0; k < line.size(); ++k) {
      const std::string pad(width[k] - line[k].size(), ' ');
      text += k == 0 ? line[k] + pad : "  " + pad + line[k];
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  }
  return out;
}

nlohmann::json render_json(const Table& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : t.rows) {
    nlohmann::json j = nlohmann::json::object();
    for (std::size_t c = 0; c < t.columns.size(); ++c)
      std::visit(
          [&](const auto& v) {
            if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) j[t.columns[c].key] = v;
          },
          row[c]);
    rows.push_back(std::move(j));
  }
  return rows;
}

}  // namespace remat
