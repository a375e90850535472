#pragma once
// Counter-based random numbers: a value is a pure function of
// (seed, stream, index), so it is the same on every backend, for every thread
// count, and when a region is recomputed.
#include "autodiff/kmath.hpp"
#include <cstdint>
#include <string_view>

namespace remat::rng {

KOKKOS_INLINE_FUNCTION std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Stream key from a name (FNV-1a), e.g. a parameter's name.
inline std::uint64_t stream_of(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

KOKKOS_INLINE_FUNCTION std::uint64_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + index);
}

// Uniform in (0, 1]: never 0, so log() below is finite.
KOKKOS_INLINE_FUNCTION double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return (double((bits(seed, stream, index) >> 11) + 1)) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller from two uniforms at counters 2i and 2i+1.
KOKKOS_INLINE_FUNCTION double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const double u1 = uniform(seed, stream, 2 * index);
  const double u2 = uniform(seed, stream, 2 * index + 1);
  return kmath::sqrt(-2.0 * kmath::log(u1)) * kmath::cos(6.283185307179586476925 * u2);
}

}  // namespace remat::rng
