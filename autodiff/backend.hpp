#pragma once
// The one seam between remat and where its data lives, in the style of
// KokkosBlas::gemm(space, ...): every copy between memories, the offload
// pool's copy-or-move decision, the elementwise loop helpers
// (autodiff/loops.hpp) and the GEMM front door (autodiff/gemm.hpp) that
// dispatches by the memory its operands live in. Nothing outside autodiff/
// calls Kokkos::deep_copy or asks whether memory is the host's
// (tests/test_layering.cpp enforces it): a new backend is a change here.
#include <Kokkos_Core.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/gemm.hpp"
#include "autodiff/loops.hpp"
#include "autodiff/tensor.hpp"
#include "autodiff/transfer.hpp"

namespace remat::backend {

// Whether the default execution space computes in host memory (the host
// backends) rather than a device's.
inline constexpr bool kHostMemory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// Copies, on the default instance, complete when they return.
void copy(const Tensor& dst, const Tensor& src);  // the same number of bytes
void upload(const Tensor& dst, const void* host, std::size_t bytes);
template <class T>
void upload(const Tensor& dst, const std::vector<T>& host) {
  upload(dst, host.data(), host.size() * sizeof(T));
}
void download(const Tensor& src, void* host, std::size_t bytes);

// The offload pool. Where the device's memory is not the host's, a
// strategy's offloaded tensors are copied into host buffers (pinned, on an
// instance of their own, so copies overlap compute); on the host backends
// the pool is the same memory and nothing is copied (the tracker moves the
// bytes between pools). A scope may ask for copies anyway: the tests run a
// device's path on the host.
bool offload_copies();
class OffloadCopiesScope {
 public:
  explicit OffloadCopiesScope(bool copies);
  ~OffloadCopiesScope();
  OffloadCopiesScope(const OffloadCopiesScope&) = delete;
  OffloadCopiesScope& operator=(const OffloadCopiesScope&) = delete;

 private:
  int previous_;
};

// A buffer of the offload pool in host memory (pinned on a device), counted
// under `label` (the tracker's pool for it) while it lives; its memory is
// kept for the next buffer of its size (autodiff/pinned_cache.hpp). Made in
// a shape-only run it has no storage (a shape-only step may offload more
// than any host holds): the tracker hears of its bytes as of a real one's.
class HostBuffer {
 public:
  HostBuffer(std::size_t bytes, const std::string& label);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  std::size_t bytes() const { return bytes_; }
  using View = Kokkos::View<unsigned char*, transfer::PinnedHostSpace>;
  const View& view() const { return view_; }

 private:
  View view_;
  std::size_t bytes_;
  std::string label_;
  std::uint64_t counted_;  // the bytes told to the tracker
};
// Copies started on the copy instance (transfer::copy_space()); wait with
// fence_copies(). Wait for the default instance first (fence_compute()) when
// the kernels that wrote `src` may still run.
void start_copy(const HostBuffer& dst, const Tensor& src);
void start_copy(const Tensor& dst, const HostBuffer& src);
void fence_copies();
void fence_compute();

// Seconds per byte to move `bytes` to host memory and back, the fastest of
// `repeats` (what a planner charges an offloaded byte); 0 where offloading
// does not copy.
double offload_seconds_per_byte(std::size_t bytes, int repeats);

}  // namespace remat::backend
