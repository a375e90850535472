// The memory tracker sees every Kokkos allocation, exactly.
#include "autodiff/memory_tracker.hpp"
#include "autodiff/ops/ops.hpp"
#include "catch.hpp"
#include "helpers.hpp"

using namespace remat;

TEST_CASE("live and peak bytes follow allocations exactly", "[memory]") {
  auto& tracker = MemoryTracker::instance();
  REQUIRE(tracker.installed());
  const std::string pool = MemoryTracker::default_pool();
  tracker.reset_peaks();
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
  tracker.reset_peaks();
  CHECK(tracker.stats(pool).peak == before);
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
