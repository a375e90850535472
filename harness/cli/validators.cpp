#include "harness/cli/validators.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
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

namespace {

template <class F>
void for_every_option(const CLI::App& app, const F& f) {
  for (const CLI::Option* opt : app.get_options()) f(const_cast<CLI::Option*>(opt));
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) for_every_option(*sub, f);
}

}  // namespace

void check_every_option(CLI::App& app) {
  const CLI::Validator finite(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        return end != s.c_str() && !std::isfinite(v) ? "must be a finite number, got '" + s + "'" : "";
      },
      "");
  const CLI::Validator not_empty([](std::string& s) -> std::string { return s.empty() ? "must not be empty" : ""; }, "");
  for_every_option(app, [&](CLI::Option* opt) {
    if (opt->get_type_size() == 0) return;  // a flag
    const std::string type = opt->get_type_name();
    if (type.rfind("FLOAT", 0) == 0) opt->check(finite);
    if (type == "TEXT") opt->check(not_empty);  // after the option's own checks (those add to the type name)
  });
}

void refuse_empty_list_items(const CLI::App& app, const std::vector<std::string>& words) {
  std::vector<std::string> lists;  // "--seq", ...
  for_every_option(app, [&](CLI::Option* opt) {
    if (opt->get_delimiter() == ',')
      for (const auto& name : opt->get_lnames()) lists.push_back("--" + name);
  });
  auto is_list = [&](const std::string& name) { return std::find(lists.begin(), lists.end(), name) != lists.end(); };
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const auto eq = w.find('=');
    if (w.rfind("--", 0) == 0 && eq != std::string::npos && is_list(w.substr(0, eq)))
      split_list(w.substr(eq + 1), w.substr(0, eq));
    else if (is_list(w) && i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0)
      split_list(words[i + 1], w);
  }
}

}  // namespace remat::cli
