#pragma once
// Copies between device memory and host memory that can overlap compute:
// host buffers in page-locked memory (Kokkos' pinned host space) and copies
// on an execution-space instance of their own (its own stream on a GPU), so
// kernels on the default instance run meanwhile. On the host backends both
// are the plain host space and the default instance.
#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdint>
#include <memory>

#include "autodiff/tensor.hpp"

namespace remat::transfer {

#ifdef KOKKOS_ENABLE_CUDA
using PinnedHostSpace = Kokkos::CudaHostPinnedSpace;
#else
using PinnedHostSpace = Kokkos::HostSpace;
#endif

// The instance copies run on (created on first use).
ExecSpace copy_space();
// Frees that instance; Runtime calls it before Kokkos is finalised.
void release();

// What the copies cost since the last reset: the time they took on the copy
// instance, and the time the computing thread spent on them (issuing them,
// pinned allocations, waiting for them). On a device the difference ran
// behind compute; a host copies synchronously, so there the two are equal.
struct CopyTimes {
  double copy_seconds = 0;
  double wait_seconds = 0;
};
CopyTimes copy_times();
void reset_copy_times();
// Puts `fresh` in place of the copy times and returns them (step/step_scope.hpp).
CopyTimes exchange_copy_times(CopyTimes fresh);

// Times one batch of copies on the copy instance: made before the first is
// issued, `issued()` after the last, `finished()` once the copy instance has
// been fenced (adds the batch's time to copy_seconds).
class CopyBatch {
 public:
  CopyBatch();
  ~CopyBatch();
  CopyBatch(const CopyBatch&) = delete;
  CopyBatch& operator=(const CopyBatch&) = delete;
  void issued();
  void finished();

 private:
  struct Clock;
  std::unique_ptr<Clock> clock_;
};

// Adds the time from construction to destruction to wait_seconds.
class WaitClock {
 public:
  WaitClock();
  ~WaitClock();
  WaitClock(const WaitClock&) = delete;
  WaitClock& operator=(const WaitClock&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

// A shape-only run copies nothing: offloaded bytes change pools at once. A
// device model that prices such a run (estimate/device_model.hpp) listens
// to what a device would copy: an offload group's bytes out at the end of its
// forward, back in when it is fetched or prefetched, and the points where
// the step waits for a group's copy. Groups are named by address, valid
// from their copy out until the wait that ends it.
class CopyListener {
 public:
  virtual ~CopyListener() = default;
  virtual void copy_out(const void* group, std::int64_t bytes) = 0;
  virtual void copy_in(const void* group, std::int64_t bytes) = 0;
  virtual void wait(const void* group) = 0;
};
// The listener (null: none; per thread) and putting one in its place.
CopyListener* copy_listener();
CopyListener* exchange_copy_listener(CopyListener* listener);

}  // namespace remat::transfer
