#pragma once
// Element types a Tensor can hold, and a dispatcher from the runtime tag to a
// compile-time type, so that one kernel template serves float and double.
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

// Calls f(T{}) with T the floating type of `t`; integer tensors are not
// differentiable and have no float kernels.
template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: break;
  }
  throw std::invalid_argument(std::string("expected a float32 or float64 tensor, got ") + dtype_name(t));
}

}  // namespace remat
