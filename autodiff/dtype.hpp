#pragma once
// Element types a Tensor can hold, and a dispatcher from the runtime tag to a
// compile-time type (REMAT_DISPATCH_FLOAT), so that one kernel serves float
// and double.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace remat {

enum class DType { f32, f64, i32 };

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
  }
  return "?";
}

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::i32; };

// Throws std::invalid_argument unless `t` is a floating type (integer
// tensors are not differentiable and have no float kernels).
inline DType require_float_dtype(DType t) {
  if (t != DType::f32 && t != DType::f64)
    throw std::invalid_argument(std::string("expected a float32 or float64 tensor, got ") + dtype_name(t));
  return t;
}

}  // namespace remat

// Runs the block that follows with `T` the floating type `dtype` names:
//   REMAT_DISPATCH_FLOAT(x.dtype(), T, { T* p = x.data<T>(); ... });
// A macro rather than a generic lambda (f(float{}), f(double{})): nvcc
// rejects a device lambda (KOKKOS_LAMBDA) defined inside a generic lambda,
// and kernels are written once for both types.
#define REMAT_DISPATCH_FLOAT(dtype, T, ...)                   \
  switch (::remat::require_float_dtype(dtype)) {              \
    case ::remat::DType::f32: {                               \
      using T = float;                                        \
      __VA_ARGS__                                             \
    } break;                                                  \
    default: {                                                \
      using T = double;                                       \
      __VA_ARGS__                                             \
    } break;                                                  \
  }
