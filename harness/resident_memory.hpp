#pragma once
// The process's resident set, as the operating system counts it: the measure
// PyTorch's memory figures use (peak resident set during the steps minus the
// resident set once the model and batch exist). The tracker's bytes are exact
// but see Kokkos allocations only; this sees everything, the heap's retained
// memory and the BLAS's buffers included.
#include <cstdint>

namespace remat {

// Current and peak resident bytes (Linux /proc/self/status VmRSS, VmHWM); -1
// where the system does not say.
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();
// Sets the peak to the current resident set (Linux 4.0 and later); false if
// the system refused, and the peak then covers the process's whole life.
bool reset_peak_resident();

}  // namespace remat
