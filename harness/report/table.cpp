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
      // A column's format is for its values; a text cell (a note in place of a value) stands as it is.
      const bool as_is = !col.text || std::holds_alternative<std::string>(row[c]) || std::holds_alternative<std::monostate>(row[c]);
      lines.back().push_back(as_is ? plain_text(row[c]) : col.text(row[c]));
    }
  }
  std::vector<std::size_t> width(shown.size(), 0);
  std::vector<bool> left(shown.size(), false);
  for (std::size_t k = 0; k < shown.size(); ++k) left[k] = k == 0 || t.columns[shown[k]].left;
  for (const auto& line : lines)
    for (std::size_t k = 0; k < line.size(); ++k) width[k] = std::max(width[k], line[k].size());
  std::string out;
  for (const auto& line : lines) {
    std::string text;
    for (std::size_t k = 0; k < line.size(); ++k) {
      const std::string pad(width[k] - line[k].size(), ' ');
      text += (k == 0 ? "" : "  ") + (left[k] ? line[k] + pad : pad + line[k]);
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
