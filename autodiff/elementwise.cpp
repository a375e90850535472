#include "autodiff/elementwise.hpp"

#include "autodiff/loops.hpp"
#include "autodiff/shape_only.hpp"

namespace remat {

Tensor clone(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.label());
  if (!shape_only()) Kokkos::deep_copy(out.bytes(), t.bytes());
  out.set_tag(t.tag());
  return out;
}

Tensor rows_copy(const Tensor& t, std::int64_t first, std::int64_t count, const std::string& label) {
  Shape shape = t.shape();
  if (shape.empty() || first < 0 || count < 0 || first + count > shape[0])
    throw std::invalid_argument("rows_copy: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                ") of " + to_string(t.shape()));
  shape[0] = count;
  Tensor out = Tensor::empty(shape, t.dtype(), label);
  if (shape_only()) return out;
  const std::size_t row = count ? out.nbytes() / std::size_t(count) : 0;
  const auto part = std::make_pair(std::size_t(first) * row, std::size_t(first + count) * row);
  Kokkos::deep_copy(out.bytes(), Kokkos::subview(t.bytes(), part));
  return out;
}

namespace {

// f(d, s) over dst's and src's elements, each as its own type.
template <class F>
void over_pairs(const char* name, const Tensor& dst, const Tensor& src, const F& f) {
  if (dst.shape() != src.shape())
    throw std::invalid_argument(std::string(name) + ": " + to_string(dst.shape()) + " and " + to_string(src.shape()));
  if (shape_only()) return;
  REMAT_DISPATCH_COMPUTE(dst.dtype(), D, {
    D* d = dst.data<D>();
    REMAT_DISPATCH_COMPUTE(src.dtype(), S, {
      const S* s = src.data<S>();
      Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(0, dst.numel()),
                           KOKKOS_LAMBDA(std::int64_t i) { f(d[i], s[i]); });
    });
  });
}

struct AddTo {
  template <class D, class S>
  KOKKOS_INLINE_FUNCTION void operator()(D& d, const S& s) const {
    using A = compute_t<D>;
    d = A(A(d) + A(s));
  }
};
struct CopyTo {
  template <class D, class S>
  KOKKOS_INLINE_FUNCTION void operator()(D& d, const S& s) const {
    // Through double: float64 into float32 rounds once, as weight files do.
    d = D(compute_t<D>(double(s)));
  }
};

}  // namespace

void add_inplace(const Tensor& dst, const Tensor& src) { over_pairs("add_inplace", dst, src, AddTo{}); }

void convert_into(const Tensor& dst, const Tensor& src) { over_pairs("convert", dst, src, CopyTo{}); }

Tensor converted(const Tensor& t, DType to, const std::string& label) {
  Tensor out = Tensor::empty(t.shape(), to, label);
  convert_into(out, t);
  out.set_tag(t.tag());
  return out;
}

void fill(const Tensor& t, double value) {
  if (shape_only()) return;
  REMAT_DISPATCH_COMPUTE(t.dtype(), T, {
    T* d = t.data<T>();
    const T v = T(A(value));
    Kokkos::parallel_for("fill", Kokkos::RangePolicy<ExecSpace>(0, t.numel()),
                         KOKKOS_LAMBDA(std::int64_t i) { d[i] = v; });
  });
}

void scale_inplace(const Tensor& t, double factor) {
  REMAT_DISPATCH_FLOAT(t.dtype(), T, {
    T* x = t.data<T>();
    const T f = T(factor);
    backend::for_each_element("scale_inplace", t.numel(), KOKKOS_LAMBDA(std::int64_t i) { x[i] *= f; });
  });
}

}  // namespace remat
