#include "autodiff/backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/pinned_cache.hpp"

namespace remat::backend {
namespace {

using HostBytes = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
using ConstHostBytes = Kokkos::View<const unsigned char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

void require_bytes(const Tensor& t, std::size_t bytes, const char* what) {
  if (t.nbytes() != bytes)
    throw std::logic_error(std::string(what) + ": " + std::to_string(bytes) + " bytes for a tensor of " +
                           std::to_string(t.nbytes()));
}

// -1: the backend's default; 0 or 1: a scope's choice (per thread, as the tape).
int& copies_override() {
  thread_local int choice = -1;
  return choice;
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  require_bytes(dst, src.nbytes(), "copy");
  if (shape_only()) return;
  Kokkos::deep_copy(dst.bytes(), src.bytes());
}

void upload(const Tensor& dst, const void* host, std::size_t bytes) {
  require_bytes(dst, bytes, "upload");
  if (shape_only()) return;
  Kokkos::deep_copy(dst.bytes(), ConstHostBytes(static_cast<const unsigned char*>(host), bytes));
}

void download(const Tensor& src, void* host, std::size_t bytes) {
  require_bytes(src, bytes, "download");
  if (shape_only()) {  // no values exist: zeros
    std::memset(host, 0, bytes);
    return;
  }
  Kokkos::deep_copy(HostBytes(static_cast<unsigned char*>(host), bytes), src.bytes());
}

bool offload_copies() { return copies_override() < 0 ? !kHostMemory : copies_override() == 1; }

OffloadCopiesScope::OffloadCopiesScope(bool copies) : previous_(copies_override()) { copies_override() = copies ? 1 : 0; }
OffloadCopiesScope::~OffloadCopiesScope() { copies_override() = previous_; }

// The tracker hears of the bytes as of a View's allocation (rounded up to 8,
// as Kokkos reports it), in the pool of the label, while the buffer is held;
// the memory comes from the pinned cache (none in a shape-only run).
HostBuffer::HostBuffer(std::size_t bytes, const std::string& label)
    : bytes_(bytes), label_(label), counted_(MemoryTracker::counted_bytes(bytes)) {
  MemoryTracker::instance().on_allocate(MemoryTracker::default_pool(), this, counted_, label_);
  if (!shape_only()) view_ = pinned::take(bytes);
}

HostBuffer::~HostBuffer() {
  MemoryTracker::instance().on_deallocate(MemoryTracker::default_pool(), this, counted_, label_);
  if (view_.data()) pinned::give(std::move(view_));
}

void start_copy(const HostBuffer& dst, const Tensor& src) {
  if (shape_only()) return;
  Kokkos::deep_copy(transfer::copy_space(), dst.view(), src.bytes());
}

void start_copy(const Tensor& dst, const HostBuffer& src) {
  if (shape_only()) return;
  Kokkos::deep_copy(transfer::copy_space(), dst.bytes(), src.view());
}

void fence_copies() { transfer::copy_space().fence(); }
void fence_compute() { ExecSpace().fence(); }

double offload_seconds_per_byte(std::size_t bytes, int repeats) {
  if (!offload_copies()) return 0;
  Kokkos::View<unsigned char*, MemSpace> device("offload probe", bytes);
  Kokkos::View<unsigned char*, Kokkos::HostSpace> host("offload probe host", bytes);
  std::vector<double> seconds;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    ExecSpace().fence();
    const auto t0 = std::chrono::steady_clock::now();
    Kokkos::deep_copy(host, device);
    Kokkos::deep_copy(device, host);
    ExecSpace().fence();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(seconds.begin(), seconds.end()) / double(bytes);  // load elsewhere only adds
}

}  // namespace remat::backend
