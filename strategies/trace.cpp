#include "strategies/trace.hpp"

#include <cstdio>
#include <sstream>

namespace remat {

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GB", b / (1 << 30));
  else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1f MB", b / (1 << 20));
  else if (b >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f kB", b / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

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
