#pragma once
// Device-callable math across Kokkos versions: 3.x keeps it in
// Kokkos::Experimental, 3.7 and later in Kokkos.
#include <Kokkos_Core.hpp>

namespace remat::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::cos;
using Kokkos::erf;
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sin;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::erf;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace remat::kmath
