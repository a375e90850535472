#include "harness/cli/validators.hpp"

#include <cctype>
#include <cmath>

#include "autodiff/memory_tracker.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

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
