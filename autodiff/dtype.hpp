#pragma once
// Element types a Tensor can hold, and dispatchers from the runtime tag to a
// compile-time type, so that one kernel serves every float type:
// REMAT_DISPATCH_FLOAT (float32, float64: what optimizers, initialisers and
// I/O handle) and REMAT_DISPATCH_COMPUTE (those, bfloat16 and float16: what
// the ops' kernels handle, computing in compute_t<T>).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "autodiff/bfloat16.hpp"
#include "autodiff/float16.hpp"

namespace remat {

// bf16 and f16 are compute precisions (docs/precision.md): activations and
// the per-step copy of the weights; parameters, gradients and optimizer
// state stay float32. u8 holds bytes: a quantized weight's codes and scales
// (autodiff/quantized.hpp).
enum class DType { f32, f64, i32, bf16, f16, u8 };

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::u8: return "uint8";
  }
  return "?";
}

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::u8; };

// The element type a kernel computes and keeps statistics in for tensors of
// type t (float32 for the 16-bit types; t itself otherwise): a norm's mean and rstd,
// a softmax's log-sum-exp, a loss, every parameter's gradient.
inline DType compute_dtype(DType t) { return t == DType::bf16 || t == DType::f16 ? DType::f32 : t; }

// Throws std::invalid_argument unless `t` is a floating type (integer
// tensors are not differentiable and have no float kernels).
inline DType require_float_dtype(DType t) {
  if (t != DType::f32 && t != DType::f64)
    throw std::invalid_argument(std::string("expected a float32 or float64 tensor, got ") + dtype_name(t));
  return t;
}
inline DType require_compute_dtype(DType t) {
  if (t == DType::i32 || t == DType::u8)
    throw std::invalid_argument(std::string("expected a float tensor, got ") + dtype_name(t));
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

// REMAT_DISPATCH_FLOAT and the 16-bit types, with `A` the type to compute in
// (compute_t<T>): pointers to elements are T*, values and sums are A.
#define REMAT_DISPATCH_COMPUTE(dtype, T, ...)                 \
  switch (::remat::require_compute_dtype(dtype)) {            \
    case ::remat::DType::f32: {                               \
      using T = float;                                        \
      using A [[maybe_unused]] = float;                       \
      __VA_ARGS__                                             \
    } break;                                                  \
    case ::remat::DType::bf16: {                              \
      using T = ::remat::bf16;                                \
      using A [[maybe_unused]] = float;                       \
      __VA_ARGS__                                             \
    } break;                                                  \
    case ::remat::DType::f16: {                               \
      using T = ::remat::f16;                                 \
      using A [[maybe_unused]] = float;                       \
      __VA_ARGS__                                             \
    } break;                                                  \
    default: {                                                \
      using T = double;                                       \
      using A [[maybe_unused]] = double;                      \
      __VA_ARGS__                                             \
    } break;                                                  \
  }
