#include "harness/cli/validators.hpp"

#include <cctype>
#include <cmath>

#include "autodiff/error.hpp"

namespace remat::cli {
namespace {

// The value of a run of decimal digits, or -1 if it is not one or exceeds hi.
std::int64_t digits_value(const std::string& s, std::int64_t hi) {
  if (s.empty() || s.size() > 19) return -1;
  std::int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    if (v > (hi - (c - '0')) / 10) return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

CLI::Validator whole_number(std::int64_t lo, std::int64_t hi) {
  const std::string what = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, what](std::string& s) -> std::string {
        const std::int64_t v = digits_value(s, hi);
        return v >= lo ? "" : "must be " + what + ", got '" + s + "'";
      },
      what);
}

CLI::Validator seed_number() { return whole_number(0, INT64_MAX); }

std::int64_t parse_byte_size(const std::string& text) {
  std::size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  double value = 0;
  try {
    value = end ? std::stod(text.substr(0, end)) : -1;
  } catch (const std::exception&) {
    value = -1;
  }
  std::string unit = text.substr(end);
  for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  double scale = unit.empty() ? 1 : unit == "k" ? 1024.0 : unit == "m" ? 1048576.0 : unit == "g" ? 1073741824.0 : unit == "t" ? 1099511627776.0 : -1;
  const double bytes = value * scale;
  if (value < 0 || scale < 0 || !(bytes >= 1) || bytes > 9e18)
    throw UserError("'" + text + "' is not a positive size (e.g. 512M, 1.5G, 150MB)");
  return std::int64_t(std::llround(bytes));
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          s = std::to_string(parse_byte_size(s));
          return "";
        } catch (const UserError& e) {
          return e.what();
        }
      },
      "SIZE");
}

}  // namespace remat::cli
