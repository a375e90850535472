// Elementwise activations: each is a value and a derivative; one template
// makes the op (forward, recipe, backward) from them.
#include "autodiff/fast_math.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654, kInvSqrt2 = 0.7071067811865476, kInvSqrt2Pi = 0.3989422804014327;

// tanh through one exp: libm's tanhf is a slow scalar path (a fifth of a
// gpt2 step, profiled); exp(-2|z|) keeps it stable for any z, and fast_exp
// lets the loop vectorise.
template <class T>
KOKKOS_INLINE_FUNCTION T tanh_via_exp(T z) {
  const T e = fast_exp(T(-2) * (z < T(0) ? -z : z));
  const T t = (T(1) - e) / (T(1) + e);
  return z < T(0) ? -t : t;
}

struct GeluTanh {
  static constexpr const char* name = "gelu_tanh";
  template <class T> KOKKOS_INLINE_FUNCTION static T value(T v) {
    return T(0.5) * v * (T(1) + tanh_via_exp(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v)));
  }
  template <class T> KOKKOS_INLINE_FUNCTION static T derivative(T v) {
    const T c = T(kSqrt2OverPi), t = tanh_via_exp(c * (v + T(0.044715) * v * v * v));
    return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * v * v);
  }
};

// Phi(v) = (1 + erf(v / sqrt 2)) / 2 = erfc(-v / sqrt 2) / 2.
struct GeluErf {
  static constexpr const char* name = "gelu_erf";
  template <class T> KOKKOS_INLINE_FUNCTION static T value(T v) {
    return T(0.5) * v * fast_erfc(-v * T(kInvSqrt2));
  }
  template <class T> KOKKOS_INLINE_FUNCTION static T derivative(T v) {
    return T(0.5) * fast_erfc(-v * T(kInvSqrt2)) + v * fast_exp(T(-0.5) * v * v) * T(kInvSqrt2Pi);
  }
};

struct Silu {
  static constexpr const char* name = "silu";
  template <class T> KOKKOS_INLINE_FUNCTION static T value(T v) { return v / (T(1) + fast_exp(-v)); }
  template <class T> KOKKOS_INLINE_FUNCTION static T derivative(T v) {
    const T s = T(1) / (T(1) + fast_exp(-v));
    return s * (T(1) + v * (T(1) - s));
  }
};

template <class F>
Tensor unary_forward(const Tensor& x) {
  stats::count_forward(F::name);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), F::name);
  out.set_tag(F::name);
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* y = out.data<T>();
    for_each_element(F::name, x.numel(), KOKKOS_LAMBDA(std::int64_t i) { y[i] = T(F::value(A(px[i]))); });
  });
  return out;
}

template <class F>
Tensor unary(const Tensor& x) {
  require_float(F::name, x, "x");
  Tensor out = unary_forward<F>(x);
  OpRecorder rec(F::name, {&x});
  if (!rec) return out;
  const SavedTensor sx = save(x);
  out.set_recipe([sx] { return unary_forward<F>(sx.unpack()); });
  rec.finish({&out}, [sx](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), xv = sx.unpack();  // before the gradient is allocated
    GradTarget dx = ctx.grad_in(0);
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      const T *gy = dy.data<T>(), *px = xv.data<T>();
      T* gx = dx.t.data<T>();
      write_gradient("unary_backward", xv.numel(), gx, dx.fresh,
                     KOKKOS_LAMBDA(std::int64_t i) { return A(gy[i]) * F::derivative(A(px[i])); });
    });
  });
  return out;
}

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  stats::count_forward("swiglu");
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), "swiglu");
  out.set_tag("swiglu");
  REMAT_DISPATCH_COMPUTE(gate.dtype(), T, {
    const T *a = gate.data<T>(), *b = up.data<T>();
    T* y = out.data<T>();
    for_each_element("swiglu", gate.numel(),
                     KOKKOS_LAMBDA(std::int64_t i) { y[i] = T(Silu::value(A(a[i])) * A(b[i])); });
  });
  return out;
}

}  // namespace

Tensor gelu_tanh(const Tensor& x) { return unary<GeluTanh>(x); }
Tensor gelu_erf(const Tensor& x) { return unary<GeluErf>(x); }
Tensor silu(const Tensor& x) { return unary<Silu>(x); }

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  require_float("swiglu", gate, "gate");
  require(up.shape() == gate.shape() && up.dtype() == gate.dtype(),
          [&] { return "swiglu: gate " + to_string(gate.shape()) + " and up " + to_string(up.shape()) + " differ"; });
  Tensor out = swiglu_forward(gate, up);
  OpRecorder rec("swiglu", {&gate, &up});
  if (!rec) return out;
  const SavedTensor sa = save(gate), sb = save(up);
  out.set_recipe([sa, sb] { return swiglu_forward(sa.unpack(), sb.unpack()); });
  rec.finish({&out}, [sa, sb](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), a = sa.unpack(), b = sb.unpack();
    GradTarget da = ctx.grad_in(0), db = ctx.grad_in(1);
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      const T *gy = dy.data<T>(), *pa = a.data<T>(), *pb = b.data<T>();
      T* ga = da ? da.t.data<T>() : nullptr;
      T* gb = db ? db.t.data<T>() : nullptr;
      if (ga)
        write_gradient("swiglu_backward_gate", a.numel(), ga, da.fresh, KOKKOS_LAMBDA(std::int64_t i) {
          return A(gy[i]) * A(pb[i]) * Silu::derivative(A(pa[i]));
        });
      if (gb)
        write_gradient("swiglu_backward_up", a.numel(), gb, db.fresh,
                       KOKKOS_LAMBDA(std::int64_t i) { return A(gy[i]) * Silu::value(A(pa[i])); });
    });
  });
  return out;
}

}  // namespace remat::ops
