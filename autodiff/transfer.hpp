#pragma once
// Copies between device memory and host memory that can overlap compute:
// host buffers in page-locked memory (Kokkos' pinned host space) and copies
// on an execution-space instance of their own (its own stream on a GPU), so
// kernels on the default instance run meanwhile. On the host backends both
// are the plain host space and the default instance.
#include <Kokkos_Core.hpp>

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

}  // namespace remat::transfer
