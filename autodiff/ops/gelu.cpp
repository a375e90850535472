#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

Tensor gelu_tanh(const Tensor& x) {
  require_float("gelu_tanh", x, "x");
  const std::int64_t n = x.numel();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "gelu");
  out.set_kind(OpKind::mlp_act);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* y = out.data<T>();
    for_each("gelu_tanh_forward", n, KOKKOS_LAMBDA(std::int64_t i) {
      const T v = px[i];
      const T c = T(0.7978845608028654);  // sqrt(2 / pi)
      y[i] = T(0.5) * v * (T(1) + kmath::tanh(c * (v + T(0.044715) * v * v * v)));
    });
  });

  OpRecorder rec("gelu_tanh", {&x});
  if (rec)
    rec.finish({&out}, [sx = save(x), n](BackwardContext& ctx) {
      Tensor dy = ctx.grad_out(), xv = sx.unpack();
      GradTarget dx = ctx.grad_in(0);
      dispatch_float(dy.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T *gy = dy.data<T>(), *px = xv.data<T>();
        T* gx = dx.t.data<T>();
        const bool fresh = dx.fresh;
        for_each("gelu_tanh_backward", n, KOKKOS_LAMBDA(std::int64_t i) {
          const T v = px[i];
          const T c = T(0.7978845608028654);
          const T t = kmath::tanh(c * (v + T(0.044715) * v * v * v));
          const T d = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * v * v);
          gx[i] = fresh ? gy[i] * d : gx[i] + gy[i] * d;
        });
      });
    });
  return out;
}

}  // namespace remat::ops
