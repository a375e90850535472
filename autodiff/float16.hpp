#pragma once
// float16 (IEEE 754 binary16: sign, 5 exponent bits, 10 mantissa bits;
// subnormals down to 2^-24, largest finite 65504, infinities and NaN): the
// 16-bit type of fp16 training. A storage type like bf16 (bfloat16.hpp):
// kernels widen it to float (exact), compute in float and store the result
// rounded to nearest even; a value beyond 65504 rounds to infinity, which is
// what dynamic loss scaling (train/loss_scaler.hpp) watches for. The
// conversion to float is explicit so that no kernel computes in 16 bits by
// accident.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

#include "autodiff/bfloat16.hpp"

namespace remat {

struct f16 {
  std::uint16_t bits = 0;

  f16() = default;
  KOKKOS_INLINE_FUNCTION f16(float f) : bits(round(f)) {}  // NOLINT: stores from float are implicit
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return widen(bits); }
  KOKKOS_INLINE_FUNCTION explicit operator double() const { return double(widen(bits)); }

  // Widening on the host is branch-free, so that a loop over it vectorises
  // (the conversions were most of an fp16 step when they were not); on a
  // device, the portable code below. The two agree bit for bit
  // (tests/test_precision.cpp).
  KOKKOS_INLINE_FUNCTION static float widen(std::uint16_t h) {
#ifdef __CUDA_ARCH__
    return widen_portable(h);
#else
    return widen_branchless(h);
#endif
  }
  // Rounding on the host is branch-free too, so that a loop of stores
  // vectorises (a scalar F16C instruction per element, or a branch, keeps it
  // one element at a time: a tenth of an fp16 step at small widths); on a
  // device, the portable code below. The two agree bit for bit
  // (tests/test_precision.cpp).
  KOKKOS_INLINE_FUNCTION static std::uint16_t round(float f) {
#ifdef __CUDA_ARCH__
    return round_portable(f);
#else
    return round_branchless(f);
#endif
  }

  // Every case computed, the right one selected. A normal result: the
  // exponent rebased and 13 mantissa bits rounded off, to even (adding
  // 0xfff plus the kept last bit carries exactly when the rest is over half,
  // or half with an odd last bit; a carry into the exponent is the next
  // binade's correct value). A subnormal result (below 2^-14): one float
  // addition of 0.5, whose unit in the last place is 2^-24, float16's least
  // subnormal, so the sum's low bits are the float16 rounded to nearest even
  // by the addition itself. The addition sees only subnormal-range operands
  // (others are replaced by 0 first), so no input raises an IEEE flag beyond
  // inexact.
  KOKKOS_INLINE_FUNCTION static std::uint16_t round_branchless(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    const std::uint32_t sign = (b >> 16) & 0x8000u, ax = b & 0x7fffffffu;
    const std::uint32_t normal = ((ax + 0xfffu + ((ax >> 13) & 1u)) >> 13) - (112u << 10);
    const bool tiny = ax < 0x38800000u;
    float sum = from_bits(tiny ? ax : 0u) + 0.5f;
    std::uint32_t sum_bits;
    std::memcpy(&sum_bits, &sum, sizeof sum_bits);
    const std::uint32_t subnormal = sum_bits - 0x3f000000u;
    const std::uint32_t h = ax > 0x7f800000u ? 0x7e00u : ax >= 0x477ff000u ? 0x7c00u : tiny ? subnormal : normal;
    return std::uint16_t(sign | h);
  }

  // The exponent and mantissa bits moved to a float's place are the value
  // times 2^-112 (a float subnormal where the float16 is one), so one exact
  // multiplication by 2^112 widens every finite float16; infinities and
  // NaNs take the all-ones exponent instead, their payload kept. No input
  // raises an IEEE flag: the operands are finite (a subnormal one for a
  // float16 subnormal) and the product exact and below float's largest.
  // (Needs subnormals honoured: no flush-to-zero or denormals-are-zero, as
  // in any host build without -ffast-math; the test would see it.)
  KOKKOS_INLINE_FUNCTION static float widen_branchless(std::uint16_t h) {
    const std::uint32_t em = std::uint32_t(h & 0x7fffu) << 13, sign = std::uint32_t(h & 0x8000u) << 16;
    const float scaled = from_bits(em) * 0x1p112f;
    std::uint32_t s;
    std::memcpy(&s, &scaled, sizeof s);
    return from_bits(sign | (em >= (0x7c00u << 13) ? (em | 0x7f800000u) : s));
  }

  KOKKOS_INLINE_FUNCTION static float widen_portable(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
      if (mant == 0) return from_bits(sign);
      exp = 113;  // a subnormal: normalise it
      while (!(mant & 0x400u)) mant <<= 1, --exp;
      return from_bits(sign | exp << 23 | (mant & 0x3ffu) << 13);
    }
    if (exp == 31) return from_bits(sign | 0x7f800000u | mant << 13);
    return from_bits(sign | (exp + 112) << 23 | mant << 13);
  }

  // Round to nearest, ties to even; 65520 and beyond become infinity, NaN a
  // quiet NaN, values below 2^-25 zero.
  KOKKOS_INLINE_FUNCTION static std::uint16_t round_portable(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    const std::uint32_t sign = (b >> 16) & 0x8000u, ax = b & 0x7fffffffu;
    if (ax >= 0x7f800000u) return std::uint16_t(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);
    if (ax < 0x38800000u) {  // below 2^-14: a subnormal
      if (ax < 0x33000000u) return std::uint16_t(sign);
      const std::uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
      std::uint32_t r = m >> shift;
      const std::uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
      if (rest > half || (rest == half && (r & 1u))) ++r;
      return std::uint16_t(sign | r);
    }
    std::uint32_t h = (ax >> 13) - (112u << 10);
    const std::uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return std::uint16_t(sign | h);
  }

 private:
  KOKKOS_INLINE_FUNCTION static float from_bits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};
static_assert(sizeof(f16) == 2, "f16 is two bytes");

template <> struct ComputeType<f16> { using type = float; };

// Whether T is one of the 16-bit storage types (bf16, f16).
template <class T> inline constexpr bool is_16bit = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

}  // namespace remat
