#include "autodiff/pinned_cache.hpp"

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>

#include "autodiff/memory_tracker.hpp"

namespace remat::backend::pinned {
namespace {

struct Cache {
  std::mutex mutex;
  std::deque<View> idle;  // oldest first
  std::size_t idle_bytes = 0, in_use = 0, most_in_use = 0;
};

Cache& cache() {
  static Cache c;
  return c;
}

}  // namespace

View take(std::size_t bytes) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.in_use += bytes;
    c.most_in_use = std::max(c.most_in_use, c.in_use);
    const auto hit = std::find_if(c.idle.begin(), c.idle.end(), [&](const View& v) { return v.size() == bytes; });
    if (hit != c.idle.end()) {
      View v = *hit;
      c.idle.erase(hit);
      c.idle_bytes -= bytes;
      return v;
    }
  }
  try {
    return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(kUntrackedLabel) + "pinned host buffer"),
                bytes);
  } catch (...) {  // (none taken: what is in use stays as it was)
    std::lock_guard<std::mutex> lock(c.mutex);
    c.in_use -= bytes;
    throw;
  }
}

void give(View buffer) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.in_use -= buffer.size();
  c.idle_bytes += buffer.size();
  c.idle.push_back(std::move(buffer));
  while (c.idle_bytes > c.most_in_use) {  // (freeing a View unpins its memory)
    c.idle_bytes -= c.idle.front().size();
    c.idle.pop_front();
  }
}

std::size_t idle_bytes() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().idle_bytes;
}

void release() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.idle.clear();
  c.idle_bytes = 0;
}

}  // namespace remat::backend::pinned
