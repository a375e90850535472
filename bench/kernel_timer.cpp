// A Kokkos tool that times every kernel, region and copy of a run, for
// finding where a GPU step's time goes (the device machines have no working
// Nsight Systems). Build it as a shared library and name it at run time:
//   g++ -O2 -shared -fPIC bench/kernel_timer.cpp -o libremat_kernel_timer.so
//   CUDA_LAUNCH_BLOCKING=1 KOKKOS_PROFILE_LIBRARY=$PWD/libremat_kernel_timer.so remat time ...
// It asks Kokkos to fence after every kernel, so a kernel's time is its own;
// with CUDA_LAUNCH_BLOCKING=1 the GEMMs (cuBLAS, outside Kokkos) finish
// inside their region (remat::gemm) too. At the end it prints to stderr the
// kernels, regions and copies that took the most time, and the time between
// kernels that no region covers (the host's own work: allocations,
// bookkeeping, launches). It counts no allocations: remat's memory tracker
// holds Kokkos' allocation callback. Only Kokkos' C tool interface is used,
// so it needs no Kokkos headers and works with Kokkos 3.4 and 4.x alike.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Total {
  double seconds = 0, longest = 0;  // in all, and the longest call (a first call's outlier shows)
  std::int64_t calls = 0;
  double bytes = 0;
};

struct Timer {
  std::map<std::string, Total> kernels, regions, copies;
  std::vector<std::pair<std::string, double>> open_kernels;  // by id - 1
  std::vector<std::pair<std::string, double>> open_regions;
  std::string copy_name;
  double copy_started = 0, copy_bytes = 0;
  double started = now(), last_end = now(), uncovered = 0;
};

Timer& timer() {
  static Timer t;
  return t;
}

void begin_kernel(const char* name, std::uint64_t* id) {
  Timer& t = timer();
  if (t.open_regions.empty()) t.uncovered += now() - t.last_end;
  t.open_kernels.emplace_back(name, now());
  *id = t.open_kernels.size();
}

void end_kernel(std::uint64_t id) {
  Timer& t = timer();
  if (id == 0 || id > t.open_kernels.size()) return;
  const auto& [name, began] = t.open_kernels[id - 1];
  Total& k = t.kernels[name];
  t.last_end = now();
  k.seconds += t.last_end - began;
  k.longest = std::max(k.longest, t.last_end - began);
  ++k.calls;
  if (id == t.open_kernels.size()) t.open_kernels.pop_back();
}

void print(const char* title, const std::map<std::string, Total>& totals, double wall, bool bytes) {
  std::vector<std::pair<std::string, Total>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::fprintf(stderr, "%-12s %10s %6s %9s %9s %s\n", title, "seconds", "share", "calls", "longest",
               bytes ? "MiB  name" : "name");
  for (std::size_t i = 0; i < rows.size() && i < 30; ++i) {
    const Total& r = rows[i].second;
    std::fprintf(stderr, "%-12s %10.4f %5.1f%% %9lld %9.4f ", "", r.seconds, 100 * r.seconds / wall,
                 (long long)r.calls, r.longest);
    if (bytes) std::fprintf(stderr, "%9.1f  ", r.bytes / 1048576);
    std::fprintf(stderr, "%.110s\n", rows[i].first.c_str());
  }
}

}  // namespace

// Kokkos' tool interface: C functions found by name in this library.
extern "C" {

struct Kokkos_Tools_ToolSettings {
  bool requires_global_fencing;
  bool padding[255];
};
struct SpaceHandle {
  char name[64];
};

void kokkosp_init_library(int, std::uint64_t, std::uint32_t, void*) { timer(); }
void kokkosp_request_tool_settings(std::uint32_t, Kokkos_Tools_ToolSettings* settings) {
  settings->requires_global_fencing = true;
}

void kokkosp_begin_parallel_for(const char* name, std::uint32_t, std::uint64_t* id) { begin_kernel(name, id); }
void kokkosp_end_parallel_for(std::uint64_t id) { end_kernel(id); }
void kokkosp_begin_parallel_reduce(const char* name, std::uint32_t, std::uint64_t* id) { begin_kernel(name, id); }
void kokkosp_end_parallel_reduce(std::uint64_t id) { end_kernel(id); }
void kokkosp_begin_parallel_scan(const char* name, std::uint32_t, std::uint64_t* id) { begin_kernel(name, id); }
void kokkosp_end_parallel_scan(std::uint64_t id) { end_kernel(id); }

void kokkosp_push_profile_region(const char* name) {
  Timer& t = timer();
  if (t.open_regions.empty()) t.uncovered += now() - t.last_end;
  t.open_regions.emplace_back(name, now());
}
void kokkosp_pop_profile_region() {
  Timer& t = timer();
  if (t.open_regions.empty()) return;
  Total& r = t.regions[t.open_regions.back().first];
  t.last_end = now();
  r.seconds += t.last_end - t.open_regions.back().second;
  r.longest = std::max(r.longest, t.last_end - t.open_regions.back().second);
  ++r.calls;
  t.open_regions.pop_back();
}

void kokkosp_begin_deep_copy(SpaceHandle dst, const char*, const void*, SpaceHandle src, const char*, const void*,
                             std::uint64_t size) {
  Timer& t = timer();
  t.copy_name = std::string(src.name) + " -> " + dst.name;
  t.copy_started = now();
  t.copy_bytes = double(size);
}
void kokkosp_end_deep_copy() {
  Timer& t = timer();
  Total& c = t.copies[t.copy_name];
  c.seconds += now() - t.copy_started;
  c.longest = std::max(c.longest, now() - t.copy_started);
  c.bytes += t.copy_bytes;
  ++c.calls;
}

void kokkosp_finalize_library() {
  Timer& t = timer();
  const double wall = now() - t.started;
  double in_kernels = 0;
  for (const auto& k : t.kernels) in_kernels += k.second.seconds;
  std::fprintf(stderr, "\nkernel timer: %.3f s in all; %.3f s in kernels; %.3f s between kernels outside any region\n",
               wall, in_kernels, t.uncovered);
  print("kernels", t.kernels, wall, false);
  print("regions", t.regions, wall, false);
  print("copies", t.copies, wall, true);
}

}  // extern "C"
