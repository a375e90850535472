#include "core/memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>

#include "core/error.hpp"
#include "core/text.hpp"

namespace remat {

std::int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kilobytes = 0;
  std::string unit;
  while (in >> key >> kilobytes >> unit)
    if (key == "MemAvailable:") return kilobytes * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? std::int64_t(pages) * page : INT64_MAX;
}

void require_memory(std::int64_t bytes, const std::string& what, std::int64_t limit, bool force) {
  if (force) return;
  const std::int64_t available = available_memory();
  if (limit > 0 && limit <= available) return;  // the tracker enforces the user's own limit
  if (bytes > available)
    // In binary units, as every other byte count remat prints.
    throw UserError(what + " needs about " + human_bytes(double(bytes)) + " of memory, and " + human_bytes(double(available)) +
                    " is available; use smaller sizes, a strategy that keeps less, --mem-limit, or --force to try anyway");
}

void advise_huge_pages(void* data, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  if (data == nullptr) return;
  // Only the whole huge pages inside the buffer: its ends may share pages with
  // other allocations.
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(huge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice: failure is harmless
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace remat
