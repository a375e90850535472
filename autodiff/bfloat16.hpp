#pragma once
// bfloat16: the top half of a float32 (sign, 8 exponent bits, 7 mantissa
// bits), the 16-bit type transformer training runs in. A storage type only:
// kernels load it into float (exact), compute in float and store the result
// rounded to nearest even. The conversion to float is explicit, so that no
// kernel computes in 16 bits by accident: `a[i] + b[i]` on two bf16 values
// does not compile, `float(a[i]) + float(b[i])` does.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace remat {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  // Round to nearest, ties to even; NaN stays a (quiet) NaN.
  KOKKOS_INLINE_FUNCTION bf16(float f) : bits(round(f)) {}  // NOLINT: stores from float are implicit
  KOKKOS_INLINE_FUNCTION explicit operator float() const {
    const std::uint32_t u = std::uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  KOKKOS_INLINE_FUNCTION explicit operator double() const { return double(float(*this)); }

  KOKKOS_INLINE_FUNCTION static std::uint16_t round(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);  // NaN: keep it quiet
    u += 0x7fffu + ((u >> 16) & 1u);
    return std::uint16_t(u >> 16);
  }
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes");

// The type a kernel computes in for elements of type T: float for 16-bit
// storage, T itself otherwise (so float and double kernels are unchanged).
template <class T> struct ComputeType { using type = T; };
template <> struct ComputeType<bf16> { using type = float; };
template <class T> using compute_t = typename ComputeType<T>::type;

}  // namespace remat
