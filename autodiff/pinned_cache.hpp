#pragma once
// Host buffers for offloaded tensors, kept for reuse. Pinning host memory (on
// a GPU, cudaHostAlloc) costs far more than copying into it, and each step
// offloads the same sizes again, so a buffer given back waits for the next
// request of its size instead of being freed. What waits is bounded by the
// most the buffers ever held at once (the hungriest step's offload set): past
// that, the oldest idle buffers are freed. The memory tracker does not count
// these allocations (their label starts with kUntrackedLabel): a HostBuffer
// counts its bytes in the offload pool while it holds one.
#include <Kokkos_Core.hpp>
#include <cstddef>

#include "autodiff/transfer.hpp"

namespace remat::backend::pinned {

using View = Kokkos::View<unsigned char*, transfer::PinnedHostSpace>;

View take(std::size_t bytes);  // an idle buffer of exactly `bytes`, or a new one
void give(View buffer);        // back for reuse
std::size_t idle_bytes();      // what waits, for the tests
void release();                // frees every idle buffer (before Kokkos finalizes)

}  // namespace remat::backend::pinned
