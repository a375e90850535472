#pragma once
// A kernel's scratch buffer: a Kokkos allocation in Space, so the memory
// tracker counts it like any View. In a shape-only run it is counted (the
// bytes Kokkos would report: MemoryTracker::counted_bytes) and not made: data() is null
// and no kernel runs to read it. At real sizes a shape-only step would
// otherwise map and free gigabytes it never touches (every rotary table,
// every attention tile's workspace).
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"

namespace remat {

template <class T, class Space>
class Scratch {
 public:
  Scratch(const std::string& label, std::size_t n) : label_(label) {
    if (shape_only()) {
      counted_ = MemoryTracker::counted_bytes(std::uint64_t(n * sizeof(T)));
      MemoryTracker::instance().on_allocate(Space::name(), this, counted_, label_);
    } else {
      view_ = Kokkos::View<T*, Space>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), n);
    }
  }
  ~Scratch() {
    if (counted_) MemoryTracker::instance().on_deallocate(Space::name(), this, counted_, label_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  T* data() const { return view_.data(); }
  const Kokkos::View<T*, Space>& view() const { return view_; }

 private:
  std::string label_;
  std::uint64_t counted_ = 0;
  Kokkos::View<T*, Space> view_;
};

}  // namespace remat
