// The memory tracker sees every Kokkos allocation, exactly.
#include "autodiff/backend.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/pinned_cache.hpp"
#include "autodiff/ops/ops.hpp"
#include "catch.hpp"
#include "core/memory.hpp"
#include "helpers.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

using namespace remat;

TEST_CASE("live and peak bytes follow allocations exactly", "[memory]") {
  auto& tracker = MemoryTracker::instance();
  REQUIRE(tracker.installed());
  const std::string pool = MemoryTracker::default_pool();
  const auto enclosing = tracker.begin_peaks();
  const auto before = tracker.stats(pool).live;
  {
    Tensor a = Tensor::empty({1000}, DType::f32);
    CHECK(tracker.stats(pool).live == before + 4000);
    {
      Tensor b = Tensor::empty({500}, DType::f64);
      CHECK(tracker.stats(pool).live == before + 8000);
    }
    CHECK(tracker.stats(pool).live == before + 4000);
    CHECK(tracker.stats(pool).peak == before + 8000);
    CHECK(tracker.stats(pool).allocations == 2);
  }
  CHECK(tracker.stats(pool).live == before);
  tracker.end_peaks(enclosing);
  CHECK(tracker.stats(pool).peak >= before + 8000);  // the enclosing window saw it too
  const auto again = tracker.begin_peaks();
  CHECK(tracker.stats(pool).peak == before);  // a new window starts at what is live
  tracker.end_peaks(again);
}

TEST_CASE("peak windows nest: an inner window neither adds to nor wipes the outer's count", "[memory]") {
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  const auto outside = tracker.begin_peaks();
  const auto before = tracker.stats(pool).live;
  {
    Tensor big = Tensor::empty({2000}, DType::f32);  // 8000 bytes, in the outer window only
  }
  const auto outer = tracker.begin_peaks();
  {
    Tensor small = Tensor::empty({500}, DType::f32);  // 2000 bytes
    CHECK(tracker.stats(pool).peak == before + 2000);
    CHECK(tracker.stats(pool).allocations == 1);
  }
  tracker.end_peaks(outer);
  CHECK(tracker.stats(pool).peak == before + 8000);
  CHECK(tracker.stats(pool).allocations == 2);
  tracker.end_peaks(outside);
}

TEST_CASE("copies of a tensor share its bytes", "[memory]") {
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  const auto before = tracker.stats(pool).live;
  Tensor a = Tensor::empty({256}, DType::f32);
  Tensor b = a;
  Tensor c = a.view_as({16, 16});
  CHECK(tracker.stats(pool).live == before + 1024);
}

TEST_CASE("every copy of a tensor sees its storage released and refilled, and a label given a pool is counted there",
          "[memory]") {
  auto& tracker = MemoryTracker::instance();
  tracker.pool_for_label("refilled in a test", "test pool");
  const std::string pool = MemoryTracker::default_pool();
  const auto before = tracker.stats(pool).live, gathered = tracker.stats("test pool").live;
  Tensor w = test::random_tensor({4, 8}, 1, DType::f32);
  const Tensor kept = w, view = w.view_as({32});  // what an op keeps for its backward
  const std::vector<double> values = w.to_host_f64();
  CHECK(w.shares_storage());
  w.release();
  CHECK(!kept.resident());
  CHECK(!view.resident());
  CHECK(kept.shape() == Shape{4, 8});
  CHECK(tracker.stats(pool).live == before);  // freed: no View of it was left
  Tensor::Bytes bytes(Kokkos::view_alloc(std::string("refilled in a test")), w.nbytes());
  kept.refill(bytes);
  CHECK(tracker.stats("test pool").live == gathered + 128);
  test::upload(w, values);
  CHECK(view.to_host_f64() == values);
  CHECK_THROWS_WITH(w.refill(Tensor::Bytes("short", 4)), Catch::Contains("refill: 4 bytes for a tensor of 128"));
}

TEST_CASE("the timeline labels events with the phase", "[memory]") {
  auto& tracker = MemoryTracker::instance();
  tracker.start_timeline();
  {
    MemoryPhase phase("unit-test");
    Tensor a = Tensor::empty({10}, DType::f32);
  }
  tracker.stop_timeline();
  const auto events = tracker.timeline();
  REQUIRE(events.size() == 2);
  const auto phases = tracker.phases();
  CHECK(phases.at(events[0].phase) == "unit-test");
  CHECK(events[1].live == events[0].live - 40);
  CHECK(tracker.phase() != "unit-test");
}

TEST_CASE("offload host buffers count while held, and their memory waits for the next buffer of its size",
          "[memory][offload]") {
  auto& tracker = MemoryTracker::instance();
  tracker.pool_for_label("test host buffer", "test_host_pool");
  backend::pinned::release();
  const void* first = nullptr;
  {
    const backend::HostBuffer a(1000, "test host buffer");
    first = a.view().data();
    CHECK(tracker.stats("test_host_pool").live == 1000);
  }
  CHECK(tracker.stats("test_host_pool").live == 0);  // given back: no longer counted, kept
  CHECK(backend::pinned::idle_bytes() == 1000);
  {
    const backend::HostBuffer again(1000, "test host buffer"), other(24, "test host buffer");
    CHECK(again.view().data() == first);  // the same memory, not pinned again
    CHECK(other.view().data() != first);
    CHECK(backend::pinned::idle_bytes() == 0);
    CHECK(tracker.stats("test_host_pool").live == 1024);
  }
  CHECK(backend::pinned::idle_bytes() == 1024);  // no more than was ever held at once
  backend::pinned::release();
  CHECK(backend::pinned::idle_bytes() == 0);
}

namespace {
// The VmFlags of the mapping holding `address`, from /proc/self/smaps ("" where none is found).
std::string vm_flags_at(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(address));
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(':') > line.find(' '))
      inside = begin <= at && at < end;
    else if (inside && line.rfind("VmFlags:", 0) == 0)
      return line;
  }
  return "";
}
bool huge(const std::string& flags) { return flags.find(" hg") != std::string::npos; }
}  // namespace

// On memory from mmap, not malloc: under the tests' GLIBC_TUNABLES glibc
// advises its own large allocations, which would hide a tensor's.
TEST_CASE("a large buffer is advised into huge pages: the whole ones inside it", "[memory]") {
  const std::size_t page = std::size_t(2) << 20, span = 4 * page;
  auto* region = static_cast<unsigned char*>(
      ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(region != MAP_FAILED);
  // Whether this kernel takes the advice at all (it refuses where it has no transparent huge pages).
  unsigned char* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(region) + page - 1) &
                                                            ~std::uintptr_t(page - 1));
  const bool advisable = ::madvise(aligned + page, page, MADV_HUGEPAGE) == 0;
  if (advisable) REQUIRE(::madvise(aligned + page, page, MADV_NOHUGEPAGE) == 0);
  // From 4 KiB past an aligned start to 4 KiB short of the third page's end: pages 0 and 2 are partial.
  advise_huge_pages(aligned + 4096, 3 * page - 2 * 4096);
  INFO(vm_flags_at(aligned) << " / " << vm_flags_at(aligned + page) << " / " << vm_flags_at(aligned + 2 * page));
  CHECK(huge(vm_flags_at(aligned + page)) == advisable);
  CHECK_FALSE(huge(vm_flags_at(aligned)));
  CHECK_FALSE(huge(vm_flags_at(aligned + 2 * page)));
  advise_huge_pages(nullptr, span);  // nothing to advise: no effect
  advise_huge_pages(aligned, page - 1);
  CHECK_FALSE(huge(vm_flags_at(aligned)));
  ::munmap(region, span);
  if constexpr (backend::kHostMemory) {  // and a large tensor's storage asks for them
    Tensor large = Tensor::empty({4 << 20}, DType::f32);
    CHECK(huge(vm_flags_at(large.bytes().data() + (8 << 20))) == advisable);
  }
}
