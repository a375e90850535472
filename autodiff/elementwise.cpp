#include "autodiff/elementwise.hpp"

#include "autodiff/shape_only.hpp"

namespace remat {

Tensor clone(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.label());
  if (!shape_only()) Kokkos::deep_copy(out.bytes(), t.bytes());
  out.set_tag(t.tag());
  return out;
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  if (dst.shape() != src.shape() || dst.dtype() != src.dtype())
    throw std::invalid_argument("add_inplace: " + to_string(dst.shape()) + " += " + to_string(src.shape()));
  if (shape_only()) return;
  REMAT_DISPATCH_FLOAT(dst.dtype(), T, {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    Kokkos::parallel_for("add_inplace", Kokkos::RangePolicy<ExecSpace>(0, dst.numel()),
                         KOKKOS_LAMBDA(std::int64_t i) { d[i] += s[i]; });
  });
}

void fill(const Tensor& t, double value) {
  if (shape_only()) return;
  REMAT_DISPATCH_FLOAT(t.dtype(), T, {
    T* d = t.data<T>();
    const T v = T(value);
    Kokkos::parallel_for("fill", Kokkos::RangePolicy<ExecSpace>(0, t.numel()),
                         KOKKOS_LAMBDA(std::int64_t i) { d[i] = v; });
  });
}

}  // namespace remat
