#include "harness/resident_memory.hpp"

#include <fstream>
#include <string>

namespace remat {
namespace {

std::int64_t status_kilobytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return -1;
}

}  // namespace

std::int64_t resident_bytes() { return status_kilobytes("VmRSS"); }
std::int64_t peak_resident_bytes() { return status_kilobytes("VmHWM"); }

bool reset_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

}  // namespace remat
