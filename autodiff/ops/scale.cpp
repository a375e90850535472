#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

Tensor scaled(const Tensor& x, double s) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "scale");
  out.set_tag("scale");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* y = out.data<T>();
    const A f = A(s);
    for_each_element("scale", x.numel(), KOKKOS_LAMBDA(std::int64_t i) { y[i] = T(A(px[i]) * f); });
  });
  return out;
}

}  // namespace

Tensor scale(const Tensor& x, double s) {
  require_float("scale", x, "x");
  stats::count_forward("scale");
  Tensor out = scaled(x, s);
  OpRecorder rec("scale", {&x});
  if (rec) rec.finish({&out}, [s](BackwardContext& ctx) { ctx.accumulate(0, scaled(ctx.grad_out(), s)); });
  return out;
}

}  // namespace remat::ops
