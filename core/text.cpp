#include "core/text.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"

namespace remat {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find(sep, start), s.size());
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> split_list(const std::string& s, const std::string& what, char sep) {
  std::vector<std::string> items = split(s, sep);
  for (std::size_t i = 0; i < items.size(); ++i)
    if (items[i].empty())
      throw UserError(what + ": item " + std::to_string(i + 1) + " of '" + s + "' is empty" +
                      (items.size() > 1 ? std::string(" (a stray '") + sep + "'?)" : std::string()));
  return items;
}

std::int64_t parse_byte_size(const std::string& text) {
  // A decimal number (1e12 too), then a unit: no sign, no hex, no inf/nan.
  double value = -1;
  std::size_t end = 0;
  if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) {
    char* after = nullptr;
    value = std::strtod(text.c_str(), &after);
    end = std::size_t(after - text.c_str());
    if (end == 0 || !std::isfinite(value)) value = std::isinf(value) ? 1e300 : -1;  // too large, said below
  }
  std::string unit = text.substr(end);
  for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  const double scale = unit.empty() ? 1 : unit == "k" ? 1024.0 : unit == "m" ? 1048576.0 : unit == "g" ? 1073741824.0
                                        : unit == "t" ? 1099511627776.0 : -1;
  const double bytes = value * scale;
  if (value < 0 || scale < 0 || !(bytes >= 1))
    throw UserError("'" + text + "' is not a positive size (e.g. 512M, 1.5G, 150MB, 350k, or a byte count)");
  if (bytes > 9e18) throw UserError("'" + text + "' is too large a size (at most 8 EiB)");
  return std::int64_t(std::llround(bytes));
}

std::string xml_escape(const std::string& text) {
  std::string o;
  for (char c : text) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

}  // namespace remat
