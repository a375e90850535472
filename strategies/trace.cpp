#include "strategies/trace.hpp"

#include <cstdio>
#include <sstream>

namespace remat {


RegionTrace& Trace::region(const std::string& name) {
  for (auto& r : regions_)
    if (r.name == name) return r;
  regions_.push_back({});
  regions_.back().name = name;
  return regions_.back();
}

std::string Trace::to_string() const {
  std::ostringstream o;
  auto ops = [](const std::map<std::string, std::int64_t>& m) {
    std::string s;
    for (const auto& [op, n] : m) s += (s.empty() ? "" : ", ") + op + (n > 1 ? " x" + std::to_string(n) : "");
    return s.empty() ? std::string("none") : s;
  };
  for (const auto& r : regions_) {
    o << "region " << r.name << ": saved " << human_bytes(r.saved) << ", kept " << human_bytes(r.kept) << ", dropped "
      << human_bytes(r.dropped) << ", offloaded " << human_bytes(r.offloaded) << "\n";
    o << "  forward:    " << ops(r.forward_ops) << "\n";
    o << "  recomputed: " << ops(r.recomputed_ops) << "\n";
    for (const auto& s : r.saves) o << "    " << s << "\n";
  }
  return o.str();
}

}  // namespace remat
