#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;

Tensor gelu_tanh_forward(const Tensor& x) {
  stats::count_forward("gelu_tanh");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "gelu");
  out.set_kind(OpKind::mlp_act);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* y = out.data<T>();
    for_each("gelu_tanh_forward", x.numel(), KOKKOS_LAMBDA(std::int64_t i) {
      const T v = px[i];
      y[i] = T(0.5) * v * (T(1) + kmath::tanh(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v)));
    });
  });
  return out;
}

}  // namespace

Tensor gelu_tanh(const Tensor& x) {
  require_float("gelu_tanh", x, "x");
  Tensor out = gelu_tanh_forward(x);
  OpRecorder rec("gelu_tanh", {&x});
  if (!rec) return out;
  const SavedTensor sx = save(x);
  out.set_recipe([sx] { return gelu_tanh_forward(sx.unpack()); });
  rec.finish({&out}, [sx](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), xv = sx.unpack();  // before the gradient is allocated
    GradTarget dx = ctx.grad_in(0);
    dispatch_float(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T *gy = dy.data<T>(), *px = xv.data<T>();
      T* gx = dx.t.data<T>();
      const bool fresh = dx.fresh;
      for_each("gelu_tanh_backward", xv.numel(), KOKKOS_LAMBDA(std::int64_t i) {
        const T v = px[i];
        const T c = T(kSqrt2OverPi);
        const T t = kmath::tanh(c * (v + T(0.044715) * v * v * v));
        const T d = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * v * v);
        gx[i] = fresh ? gy[i] * d : gx[i] + gy[i] * d;
      });
    });
  });
  return out;
}

}  // namespace remat::ops
