#pragma once
// exp and erfc for the float kernels, branch-free so that loops calling them
// vectorise.
// libm's expf is a scalar call: profiled, it was a tenth of a gpt2 step
// (GELU, softmax, cross-entropy). Double keeps the library exp, so the
// finite-difference tests in double still check the true derivatives.
//
// Method: e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2, |r| <=
// ln2 / 2. ln 2 is split in a high part with few significant bits (n * hi is
// exact) and a low correction (Cody and Waite). e^r is its degree-7 Taylor
// polynomial: the truncation error is below 6e-9 relative, under a tenth of a
// float ulp, so the result is within about 1 ulp of exp.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

#include "autodiff/kmath.hpp"

namespace remat {

KOKKOS_INLINE_FUNCTION float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;      // 11 significant bits: n * hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;  // ln 2 - hi
  constexpr float kMax = 88.0f, kMin = -100.0f;  // keeps n in range; e^88 is the largest result
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23: adding it rounds to an integer
  x = x > kMax ? kMax : x;
  x = x < kMin ? kMin : x;  // NaN passes through both comparisons
  const float shifted = x * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n: n sits in the low bits of `shifted`; move it into the exponent
  // field. Below 2^-126 the result is flushed to zero. The test is on the
  // integer n: a float comparison here would stop the loop vectorising.
  // Unsigned arithmetic: a NaN's bits make n_int meaningless, and a signed
  // shift of it would be undefined (the result is NaN through p anyway).
  std::uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const std::int32_t n_int = std::int32_t(bits - 0x4B400000u);
  bits = n_int < -126 ? 0u : (std::uint32_t(n_int) + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

KOKKOS_INLINE_FUNCTION double fast_exp(double x) { return kmath::exp(x); }

// erfc through the Chebyshev fit of Press et al. (Numerical Recipes, "erfcc"):
// erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0, fractional
// error below 1.2e-7 everywhere; erfc(-z) = 2 - erfc(z). libm's erff is a
// scalar call and was most of the exact GELU's time.
KOKKOS_INLINE_FUNCTION float fast_erfc(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float e = t * fast_exp(p - z * z);
  return x < 0.0f ? 2.0f - e : e;
}

KOKKOS_INLINE_FUNCTION double fast_erfc(double x) { return 1.0 - kmath::erf(x); }

}  // namespace remat
